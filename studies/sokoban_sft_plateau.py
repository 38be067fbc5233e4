"""Why the tiny model's Sokoban SFT sat at 0.69 nats: a plain SFT loop and a grid probe.

Two diagnostics behind docs/envs/sokoban.md, "Why the earlier attempt did not learn":

* ``sft``: the SFT samples of :mod:`studies.sokoban_learning` (the BFS expert's
  episodes in the cpu-demo prompt, built by ``algorithms.sft.data.build_examples``), the
  last ``--held-out`` of them held out, trained by a bare AdamW loop on
  ``algorithms.sft.trainer.response_nll`` (random batches; no clipping, no scheduler). Prints the
  batch and held-out loss per response token every 100 steps. ``--input grid`` keeps only
  the 36 grid cells, ``<action>`` and the response of each sample (a shorter input, for
  comparison; the learning check itself always uses the full prompt).
* ``probe``: is the expert's move a function of the grid the model sees? A linear model
  and a one-hidden-layer MLP on the one-hot 36-cell grid (7 symbols), full-batch Adam;
  prints held-out accuracy and loss.

Usage::

    python -m studies.sokoban_sft_plateau sft --lr 3e-3 --steps 600
    python -m studies.sokoban_sft_plateau sft --lr 1e-3 --steps 800 --input grid
    python -m studies.sokoban_sft_plateau probe --episodes 600
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from algorithms.sft.data import SFTExample, build_examples, expert_trajectories
from algorithms.sft.trainer import collate, response_nll
from studies.sokoban_learning import ENV_ID, Budget, sft_config, tiny_policy

SYMBOLS = ("#", "_", "O", "X", "√", "P", "S")
MOVES = ("up", "down", "left", "right")
GRID_CELLS = 36


def grid_only(example: SFTExample, see_id: int) -> SFTExample:
    """The 36 cells after ``see:``, then the response prefix token and the response."""
    ids, mask = list(example.input_ids), list(example.loss_mask)
    start = ids.index(see_id) + 1
    first_response = mask.index(1)
    keep = ids[start:start + GRID_CELLS] + ids[first_response - 1:]
    keep_mask = [0] * (GRID_CELLS + 1) + mask[first_response:]
    return SFTExample(tuple(keep), tuple(keep_mask))


def sft_loop(args: argparse.Namespace) -> list[tuple[int, float, float]]:
    """Train the tiny model on the expert's samples; return (step, batch loss, held-out
    loss) rows, losses in nats per response token."""
    policy = tiny_policy(args.seed, args.arch)
    tokenizer = policy.tokenizer
    config = sft_config(Budget(), args.seed, Path("unused"))
    trajectories = expert_trajectories(ENV_ID, {}, args.episodes)
    examples, _ = build_examples(trajectories, tokenizer, config.prompt,
                                 stop=config.stop_strings, max_new_tokens=4)
    if args.input == "grid":
        see = tokenizer.convert_tokens_to_ids("see:")
        examples = [grid_only(example, see) for example in examples]
    train, held = examples[:-args.held_out], examples[-args.held_out:]
    model = policy.model
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                  lr=args.lr)
    rng = np.random.default_rng(args.seed)
    cpu = torch.device("cpu")
    rows = []
    start = time.perf_counter()
    print(f"{len(train)} training samples, {len(held)} held out; {args.input} input, "
          f"{args.arch}, lr {args.lr}", flush=True)
    for step in range(args.steps):
        batch = [train[i] for i in rng.choice(len(train), args.batch, replace=False)]
        nll, tokens = response_nll(model, *collate(batch, 0, cpu))
        (nll / tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == args.steps - 1:
            with torch.no_grad():
                held_nll, held_tokens = response_nll(model, *collate(held, 0, cpu))
            rows.append((step, float(nll.detach()) / tokens, float(held_nll) / held_tokens))
            print(f"step {step}: batch {rows[-1][1]:.3f}, held-out {rows[-1][2]:.3f} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    return rows


def probe(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """Held-out (accuracy, loss) of a linear model and an MLP on the one-hot grid."""
    trajectories = expert_trajectories(ENV_ID, {}, args.episodes)
    code = {symbol: i for i, symbol in enumerate(SYMBOLS)}
    cells = [[code[c] for c in step.observation.split()]
             for t in trajectories for step in t.steps]
    moves = torch.tensor([MOVES.index(step.action) for t in trajectories for step in t.steps])
    grids = torch.nn.functional.one_hot(torch.tensor(cells), len(SYMBOLS)).float().flatten(1)
    split = len(grids) - args.held_out
    results = {}
    for name, hidden, lr in (("linear", 0, 1e-2), ("mlp", 256, 1e-3)):
        torch.manual_seed(args.seed)
        width = GRID_CELLS * len(SYMBOLS)
        model = torch.nn.Linear(width, len(MOVES)) if not hidden else torch.nn.Sequential(
            torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, len(MOVES)))
        optimizer = torch.optim.Adam(model.parameters(), lr)
        for _ in range(2000):
            loss = torch.nn.functional.cross_entropy(model(grids[:split]), moves[:split])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            logits = model(grids[split:])
            results[name] = (float((logits.argmax(1) == moves[split:]).float().mean()),
                             float(torch.nn.functional.cross_entropy(logits, moves[split:])))
        print(f"{name}: {split} training steps, {len(grids) - split} held out: accuracy "
              f"{results[name][0]:.3f}, loss {results[name][1]:.3f} nats", flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("sft", "probe"))
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--held-out", type=int, default=300)
    parser.add_argument("--input", choices=("full", "grid"), default="full")
    parser.add_argument("--arch", choices=("llama", "gpt2"), default="llama")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    if args.what == "sft":
        sft_loop(args)
    else:
        probe(args)


if __name__ == "__main__":
    main()
