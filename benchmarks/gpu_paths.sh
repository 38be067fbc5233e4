#!/bin/bash
# The GPU paths of train.py on one CUDA GPU, end to end, in ~5 minutes and with no
# download: a randomly initialised word-level Llama (hidden 256, 4 layers, 2.4 M weights,
# KeyDoor's vocabulary) saved to a folder, then SFT, GiGPO from the SFT checkpoint
# (bf16 compute, float32 trained weights; evaluation before training), --resume,
# --eval-only, LoRA, PPO with a critic, GRPO at --run.max-staleness 1 (the HF worker on
# the GPU), the KL reference scored in that worker, torchrun (1 rank) and SIGTERM (exit
# 143).
# Each step prints "=== name: rc=N  seconds". Usage, from the repository root:
#     bash benchmarks/gpu_paths.sh [RUN_DIR]          (default /tmp/agentgym-gpu-paths)
# Results of a run on an H200: docs/gpu.md.
R=${1:-/tmp/agentgym-gpu-paths}
DEVICE=${DEVICE:-cuda}   # DEVICE=cpu runs the same steps without a GPU (a dry run)
M=$R/model
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
$PY -c "import torch,transformers,peft;print('torch',torch.__version__,'transformers',transformers.__version__,'peft',peft.__version__,torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')" || exit 1
$PY - "$M" <<'PYTHON' || exit 1
import sys
from studies.credit_assignment import TASKS, task_texts
from algorithms.training.tiny_model import text_words, tiny_llama, word_tokenizer
tokenizer = word_tokenizer(text_words(task_texts("keydoor", TASKS["keydoor"])
                                      + ["User: Assistant: <action> </action>"]))
model = tiny_llama(len(tokenizer), seed=0, hidden=256, layers=4)
model.save_pretrained(sys.argv[1])
tokenizer.save_pretrained(sys.argv[1])
PYTHON
C="--preset cpu-demo --model.name-or-path $M --run.device $DEVICE --model.dtype auto --run.output-dir $R --run.torch-threads 4 --run.overwrite"
step() {
    local name=$1; shift; local t0=$SECONDS
    echo "=== $name: $*"; timeout 300 "$@"
    echo "=== $name: rc=$?  $((SECONDS - t0)) s"
}
FULL="--model.lora-rank 0"
step sft $PY train.py --algo sft $C $FULL --sft.lr 1e-3 --run.run-name sft
step gigpo $PY train.py $C $FULL --model.init-checkpoint $R/sft --learner.lr 1e-4 --run.iterations 4 --run.save-every 2 --run.eval-before-train --run.run-name gigpo
C=${C% --run.overwrite}
step resume $PY train.py $C $FULL --model.init-checkpoint $R/sft --learner.lr 1e-4 --run.iterations 6 --run.save-every 2 --run.run-name gigpo --resume
step eval-only $PY train.py $C $FULL --eval-only --checkpoint $R/gigpo --run.run-name gigpo-eval --run.overwrite
step lora $PY train.py $C --run.iterations 2 --run.run-name lora --run.overwrite
step ppo $PY train.py $C $FULL --algo ppo --run.iterations 2 --run.run-name ppo --run.overwrite
step grpo-k1 $PY train.py $C --algo grpo --run.max-staleness 1 --run.iterations 3 --run.run-name k1 --run.overwrite
step reference-in-worker $PY train.py $C --run.max-staleness 1 --run.reference-in-worker --run.iterations 4 --run.run-name ref --run.overwrite
step torchrun $PY -m torch.distributed.run --standalone --nproc_per_node 1 train.py $C --run.iterations 2 --run.run-name ddp --run.overwrite
step sigterm bash -c "$PY train.py $C --run.iterations 50 --run.run-name term --run.overwrite & p=\$!; sleep 25; kill -TERM \$p; wait \$p; echo exit=\$?"
