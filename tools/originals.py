"""The original code this project reproduces: loading it from a checkout, and its recorded
outputs (the test data under ``tests/data/originals/``).

Two halves, used by ``tools/record_originals.py`` (which runs the originals and writes the
fixtures) and by the differential tests (which read the fixtures, and load the originals
themselves when a checkout is named):

- Loaders (context managers): verl-agent's Sokoban and gym_cards env packages, its
  rollout (prompts, env managers, ``TrajectoryCollector``), and RAGEN's FrozenLake, each
  imported from a checkout with the parent packages stood in for (their ``__init__``
  files import Ray, OmegaConf and every other env). Nothing of the originals is copied
  into this repository; a missing dependency raises :class:`OriginalUnavailable` with its
  reason.
- Fixtures: one gzipped JSON file per original and area, ``{"original", "commit",
  "command", "recorded_with", "what", "cases"}``. Long float arrays are stored as
  :func:`summarize` gives them (a few sampled values and random-sign sums over every
  element), so that a fixture stays small; :func:`summary_difference` compares an array
  of ours with one.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import types
from collections.abc import Iterator
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "data" / "originals"
"""Where the recorded outputs live (``<name>.json.gz``)."""
ORIGINALS = {"verl-agent": "xlan156/verl-agent", "RAGEN": "mll-lab-nu/RAGEN",
             "GraphGPO": "zzj1111/alfworldauto"}
"""The repositories recorded (GraphGPO's ``recipe/GraphGPO/core_graph.py`` is read from a
fork of verl-agent that ships it)."""
HEADER = ("original", "commit", "command", "recorded_with", "what", "cases")
"""The keys of every fixture, in this order."""
REQUIRE_ENV = "AGENTGYM_REQUIRE_DIFFERENTIAL"
"""Set to 1 by CI (``.ci/run``): a test marked ``differential`` that skips fails instead."""

SOKOBAN_PACKAGE = "agent_system.environments.env_package.sokoban"
SOKOBAN_DEPENDENCIES = ("gym", "gym_sokoban", "imageio", "pkg_resources", "torch",
                        "transformers", "matplotlib")
GYM_CARDS_PACKAGE = "agent_system.environments.env_package.gym_cards"
GYM_CARDS_FOLDER = "agent_system/environments/env_package/gym_cards/gym-cards"
DISCOVERY_ACTIONS = "agent_system.environments.env_package.discovery.actions"


class OriginalUnavailable(Exception):
    """The original cannot run here (a dependency is missing); the message says which."""


# --------------------------------------------------------------------------- loaders


def _forget(prefixes: tuple[str, ...]) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in prefixes]:
        del sys.modules[name]


def _stand_in_packages(packages: dict[str, Path]) -> None:
    """Empty package modules at ``packages`` (name -> folder): their ``__init__`` files
    are not run, their submodules import from the folders."""
    for name, folder in packages.items():
        module = types.ModuleType(name)
        module.__path__ = [str(folder)]
        sys.modules[name] = module


def _missing(names: tuple[str, ...]) -> list[str]:
    return [name for name in names if importlib.util.find_spec(name) is None]


@contextlib.contextmanager
def verl_agent_sokoban(root: str | Path) -> Iterator[types.SimpleNamespace]:
    """verl-agent's Sokoban env (``env``), its room generation (``room_utils``) and its
    action projection (``projection``), from the checkout ``root``.

    Raises:
        FileNotFoundError: ``root`` has no Sokoban env package.
        OriginalUnavailable: a dependency of theirs (old ``gym``, ``gym_sokoban``, ...)
            does not import here.
    """
    root = Path(root)
    parts = SOKOBAN_PACKAGE.split(".")
    if not root.joinpath(*parts).is_dir():
        raise FileNotFoundError(f"{root} has no {'/'.join(parts)}")
    missing = _missing(SOKOBAN_DEPENDENCIES)
    if missing:
        raise OriginalUnavailable(f"verl-agent's Sokoban env needs {', '.join(missing)} "
                                  "(not importable here)")
    _stand_in_packages({".".join(parts[:depth]): root.joinpath(*parts[:depth])
                        for depth in range(1, len(parts) + 1)
                        if ".".join(parts[:depth]) not in sys.modules})
    try:
        yield types.SimpleNamespace(
            env=importlib.import_module(f"{SOKOBAN_PACKAGE}.sokoban.env"),
            room_utils=importlib.import_module(f"{SOKOBAN_PACKAGE}.sokoban.room_utils"),
            projection=importlib.import_module(f"{SOKOBAN_PACKAGE}.projection"),
        )
    finally:
        _forget((parts[0],))


def sokoban_surface_dir() -> Path:
    """gym-sokoban's tile pictures (the ``surface`` folder of the installed package)."""
    import gym_sokoban

    return Path(gym_sokoban.__file__).parent / "envs" / "surface"


@contextlib.contextmanager
def verl_agent_gym_cards(root: str | Path) -> Iterator[types.SimpleNamespace]:
    """verl-agent's gym-cards envs (``envs``: game -> class), its ``gym_projection``
    (``projection``) and its card pictures (``img``), from the checkout ``root``.

    Raises:
        FileNotFoundError: ``root`` has no gym-cards package.
        OriginalUnavailable: Pillow, torch or the DejaVu fonts are missing, or modules of
            those names are already imported from elsewhere.
    """
    root = Path(root)
    source = root / GYM_CARDS_FOLDER / "gym_cards" / "envs"
    if not source.is_dir():
        raise FileNotFoundError(f"{root} has no {GYM_CARDS_FOLDER}/gym_cards/envs")
    missing = _missing(("PIL", "torch"))
    if missing:
        raise OriginalUnavailable(f"verl-agent's gym_cards needs {', '.join(missing)} "
                                  "(not importable here)")
    from PIL import ImageFont

    try:
        ImageFont.truetype("dejavu/DejaVuSans.ttf", 20)
        ImageFont.truetype("dejavu/DejaVuSans-Bold.ttf", 20)
    except OSError as error:
        raise OriginalUnavailable("gym-cards draws with the DejaVu fonts, which are not "
                                  "installed here") from error
    parts = GYM_CARDS_PACKAGE.split(".")
    stubs = {"gym_cards": source.parent, "gym_cards.envs": source}
    stubs.update({".".join(parts[:depth]): root.joinpath(*parts[:depth])
                  for depth in range(1, len(parts) + 1)})
    clashes = [name for name in stubs if name in sys.modules]
    if clashes:
        raise OriginalUnavailable(f"modules {clashes} are already imported from elsewhere")
    _stand_in_packages(stubs)
    try:
        yield types.SimpleNamespace(
            envs={"ezpoints": importlib.import_module("gym_cards.envs.ezpoints").EZPointEnv,
                  "numberline": importlib.import_module("gym_cards.envs.numberline")
                  .NumberLineEnv,
                  "blackjack": importlib.import_module("gym_cards.envs.blackjack")
                  .BlackjackEnv},
            projection=importlib.import_module(f"{GYM_CARDS_PACKAGE}.projection")
            .gym_projection,
            img=source / "img",
        )
    finally:
        _forget(("gym_cards", parts[0]))


@contextlib.contextmanager
def ragen_frozenlake(root: str | Path) -> Iterator[types.SimpleNamespace]:
    """RAGEN's FrozenLake env (``env``) and its config (``config``), from the checkout
    ``root``.

    Raises:
        FileNotFoundError: ``root`` has no ``ragen/env/frozen_lake/env.py``.
        OriginalUnavailable: ``omegaconf`` (which ``ragen.utils`` imports) is missing.
    """
    root = Path(root)
    if not (root / "ragen/env/frozen_lake/env.py").is_file():
        raise FileNotFoundError(f"{root} has no ragen/env/frozen_lake/env.py")
    if _missing(("omegaconf",)):
        raise OriginalUnavailable("RAGEN's ragen.utils needs omegaconf (not importable here)")
    _stand_in_packages({name: root.joinpath(*name.split(".")) for name in ("ragen", "ragen.env")})
    try:
        yield types.SimpleNamespace(
            env=importlib.import_module("ragen.env.frozen_lake.env"),
            config=importlib.import_module("ragen.env.frozen_lake.config"),
        )
    finally:
        _forget(("ragen",))


@contextlib.contextmanager
def verl_agent_rollout(root: str | Path, deps: str | Path | None = None
                       ) -> Iterator[types.SimpleNamespace]:
    """verl-agent's ``TrajectoryCollector`` (``rollout``, from
    ``agent_system/multi_turn_rollout/rollout_loop.py``), its Sokoban and gym-cards prompt
    modules (``prompts``), its env managers (``managers``), ``OmegaConf`` (``omegaconf``)
    and its ``process_image`` (``utils``), imported from the checkout with the parts of
    their packages that do not import here stood in for: ``datasets`` (unused by the
    rollout), the env managers' package ``__init__`` (it imports every env),
    DiscoveryWorld's action mapper (its game is not in the checkout; the Sokoban and Gym
    Cards managers never use it), and verl's Qwen2-VL module, whose ``get_rope_index``
    (3-D positions, not compared) imports names transformers 5 no longer has. ``deps``:
    a folder of their extra packages (``omegaconf``, ``tensordict``, ``codetiming``), put
    first on ``sys.path`` while importing.

    Raises:
        FileNotFoundError: ``root`` has no ``agent_system/multi_turn_rollout``.
        OriginalUnavailable: their extra packages are missing or their modules do not
            import.
    """
    import torch

    root = Path(root)
    if not (root / "agent_system" / "multi_turn_rollout" / "rollout_loop.py").is_file():
        raise FileNotFoundError(f"{root} has no agent_system/multi_turn_rollout/rollout_loop.py")
    added = [str(root)] + ([str(deps)] if deps else [])
    missing = [] if deps else _missing(("omegaconf", "tensordict", "codetiming"))
    if missing:
        raise OriginalUnavailable(f"verl-agent's rollout needs {', '.join(missing)} "
                                  "(set VERL_AGENT_DEPS)")
    saved = dict(sys.modules)
    sys.path[:0] = added
    stand_ins = {"datasets": types.ModuleType("datasets"),
                 "agent_system.environments": types.ModuleType("agent_system.environments"),
                 "verl.models.transformers.qwen2_vl": types.ModuleType("qwen2_vl"),
                 DISCOVERY_ACTIONS: types.ModuleType(DISCOVERY_ACTIONS)}
    stand_ins["agent_system.environments"].EnvironmentManagerBase = object
    stand_ins[DISCOVERY_ACTIONS].all_plausible_action_mapper = None
    stand_ins["agent_system.environments"].__path__ = [
        str(root / "agent_system" / "environments")]
    stand_ins["verl.models.transformers.qwen2_vl"].get_rope_index = (
        lambda processor, input_ids, image_grid_thw=None, attention_mask=None, **_:
        torch.zeros((3, input_ids.shape[-1]), dtype=torch.long))
    sys.modules.update(stand_ins)
    try:
        try:
            loaded = types.SimpleNamespace(
                rollout=importlib.import_module("agent_system.multi_turn_rollout.rollout_loop"),
                utils=importlib.import_module("agent_system.multi_turn_rollout.utils"),
                prompts={name: importlib.import_module(
                    f"agent_system.environments.prompts.{name}")
                    for name in ("sokoban", "gym_cards")},
                managers=importlib.import_module("agent_system.environments.env_manager"),
                omegaconf=importlib.import_module("omegaconf").OmegaConf,
            )
        except ImportError as error:
            raise OriginalUnavailable(f"verl-agent's rollout does not import here: {error}"
                                      ) from error
        finally:
            for path in added:
                sys.path.remove(path)
        yield loaded
    finally:
        # forget the checkout's modules and the stand-ins; libraries they imported stay
        # (torch registers its operators once per process)
        for name in set(sys.modules) - set(saved):
            if name.split(".")[0] in ("agent_system", "verl", "datasets"):
                del sys.modules[name]
        sys.modules.update(saved)


def checkout_commit(root: str | Path, given: str | None = None) -> str:
    """The commit of the checkout ``root``: ``given`` when named, else ``git rev-parse``.

    Raises:
        SystemExit: ``root`` is not a git work tree and no commit was given.
    """
    if given:
        return given
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{root} is not a git work tree: name its commit (--*-commit)")
    return done.stdout.strip()


# --------------------------------------------------------------------------- fixtures


def versions(*names: str) -> dict[str, str]:
    """Python's version and each named distribution's (a fixture's ``recorded_with``)."""
    found = {"python": platform.python_version()}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def fixture_path(name: str) -> Path:
    return FIXTURES / f"{name}.json.gz"


def write_fixture(name: str, fixture: dict[str, Any], folder: Path = FIXTURES) -> Path:
    """Write ``fixture`` (the :data:`HEADER` keys) as ``folder/<name>.json.gz``; the bytes
    depend only on the content (no time stamp)."""
    if tuple(fixture) != HEADER:
        raise ValueError(f"a fixture has the keys {HEADER}, got {tuple(fixture)}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json.gz"
    text = json.dumps(fixture, separators=(",", ":"), allow_nan=False)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                filename="", compresslevel=9) as out:
        out.write(text.encode("utf-8"))
    return path


@cache
def _read(path: str) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def read_fixture(name: str, folder: Path = FIXTURES) -> dict[str, Any]:
    """The fixture ``name`` (read once per process; do not mutate it).

    Raises:
        FileNotFoundError: no such fixture (they are committed: a missing one is an error,
            never a reason to skip).
        ValueError: the file lacks a header key.
    """
    path = folder / f"{name}.json.gz"
    if not path.is_file():
        raise FileNotFoundError(f"no recorded outputs at {path} (make them with "
                                "tools/record_originals.py)")
    fixture = _read(str(path))
    missing = [key for key in HEADER if key not in fixture]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)}")
    return fixture


def digest(*arrays: Any) -> str:
    """A short hex digest of arrays (dtype, shape and bytes) or strings, to check that an
    input regenerated here is the one the original was given."""
    hasher = hashlib.sha256()
    for value in arrays:
        if isinstance(value, str):
            hasher.update(b"s" + value.encode("utf-8"))
            continue
        array = np.ascontiguousarray(value)
        hasher.update(f"{array.dtype.str}{array.shape}".encode())
        hasher.update(array.tobytes())
    return hasher.hexdigest()[:16]


def frame_digest(image: Any) -> str:
    """The first 16 hex digits of the SHA-256 of a uint8 frame's bytes (row-major).

    Raises:
        TypeError: the frame is not uint8 (its bytes would not say its pixels).
    """
    array = np.asarray(image)
    if array.dtype != np.uint8:
        raise TypeError(f"a frame is uint8, got {array.dtype}")
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def tokenizer_digest(tokenizer: Any) -> str:
    """A digest of a Hugging Face tokenizer's vocabulary, special tokens and chat template
    (the token ids recorded with it hold only for the same tokenizer)."""
    vocabulary = json.dumps(sorted(tokenizer.get_vocab().items()))
    return digest(vocabulary, json.dumps(tokenizer.all_special_tokens),
                  tokenizer.chat_template or "")


def plain(value: Any) -> Any:
    """``value`` as JSON holds it: lists for tuples and arrays, Python scalars for NumPy
    ones, string keys, recursively."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def random_image(seed: int, height: int, width: int) -> np.ndarray:
    """(height, width, 3) uint8 random pixels of ``seed`` (inputs the tests regenerate)."""
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


SKETCHES = 8
"""Random-sign sums per summarized array."""
SAMPLE = 48
"""Values sampled per summarized array (evenly spread)."""


@lru_cache(maxsize=16)
def _signs(n: int) -> np.ndarray:
    """(SKETCHES, n) int8 random signs (+1 or -1), the same on every machine and NumPy
    version (``RandomState``'s stream is frozen)."""
    return np.stack([(np.random.RandomState(1_000 + k).randint(0, 2, n) * 2 - 1)
                     .astype(np.int8) for k in range(SKETCHES)])


def _sketch(flat: np.ndarray) -> np.ndarray:
    """(SKETCHES,) the random-sign sums of ``flat``."""
    return np.array([np.dot(flat, signs.astype(np.float64)) for signs in _signs(flat.size)])


def _positions(count: int) -> np.ndarray:
    return np.unique(np.linspace(0, count - 1, min(SAMPLE, count)).astype(np.int64))


def summarize(values: Any, mask: Any = None) -> dict[str, Any]:
    """A compact record of a float array: its shape, :data:`SAMPLE` values spread evenly
    over its elements (over those where ``mask`` is true, when given) and
    :data:`SKETCHES` sums of every element times a random sign.

    An array that differs from the recorded one by ``d`` at any single element moves
    every sum by ``d``; differences at many elements would have to cancel in all eight
    sums at once to go unseen. Summing ``n`` float64 values of size ``s`` costs about
    ``sqrt(n) * s * 1e-16`` in rounding, far below the 1e-6 the comparisons allow.
    """
    array = np.asarray(values, dtype=np.float64)
    flat = array.reshape(-1)
    where = (np.arange(flat.size) if mask is None
             else np.flatnonzero(np.broadcast_to(np.asarray(mask, dtype=bool),
                                                 array.shape).reshape(-1)))
    picked = where[_positions(where.size)] if where.size else where
    return {"shape": list(array.shape), "at": picked.tolist(),
            "values": flat[picked].tolist(), "sketch": _sketch(flat).tolist()}


def summary_difference(recorded: dict[str, Any], values: Any) -> float:
    """The largest absolute difference between ``values`` and the recorded array, over
    the sampled elements and the random-sign sums (``inf`` when the shapes differ)."""
    array = np.asarray(values, dtype=np.float64)
    if list(array.shape) != recorded["shape"]:
        return float("inf")
    flat = array.reshape(-1)
    sampled = np.abs(flat[np.asarray(recorded["at"], dtype=np.int64)]
                     - np.asarray(recorded["values"]))
    sketched = np.abs(_sketch(flat) - np.asarray(recorded["sketch"]))
    return float(max(sampled.max(initial=0.0), sketched.max(initial=0.0)))


def required() -> bool:
    """Whether a skipped differential test must fail (:data:`REQUIRE_ENV` is ``1``)."""
    return os.environ.get(REQUIRE_ENV) == "1"
