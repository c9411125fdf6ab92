#!/usr/bin/env bash
# The one GPU check (issue 27), run on a CUDA machine from the repository root, with the
# wheels folder .whl/ copied along:
#
#   bash benchmarks/gpu_check.sh
#
# It installs nothing from the network (the GPU machine may have none): that machine's own
# torch is used, ampkit runs from src/ (PYTHONPATH, no build), and packages its image lacks
# travel as wheels in .whl/ (prepared beforehand: blake3, a core dependency the checkpoints
# hash with, and torchao for the fp8 part; the GPU machine's Python version first):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 -d .whl blake3 torchao==<matching>
# Everything it prints also lands under $OUT: env.txt, pytest_gpu.log, gpu_bench.log and
# gpu_bench.md / gpu_bench_*.json, checkpoint_speed.json. Each step has its own timeout so a
# hang in one still leaves the others' figures.
set -uo pipefail
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
    SITE=$(mktemp -d)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl || exit 3
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c "import torch, ampkit; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0)); print('ampkit', ampkit.__file__)"
    python3 -c "import torchao; print('torchao', torchao.__version__)" 2>&1 | tail -1
    python3 -c "import blake3; print('blake3', blake3.__version__)" 2>&1 | tail -1
} 2>&1 | tee "$OUT/env.txt"

echo "== pytest -m gpu"
timeout 200 python3 -m pytest -m gpu -x -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.log"

echo "== gpu_bench.py"
OUT="$OUT" timeout 420 python3 benchmarks/gpu_bench.py 2>&1 | tee "$OUT/gpu_bench.log"

echo "== checkpoint_speed.py (the device's disk)"
timeout 120 python3 benchmarks/checkpoint_speed.py --sizes 50 --rounds 3 \
    --json "$OUT/checkpoint_speed.json" 2>&1 | tail -8
