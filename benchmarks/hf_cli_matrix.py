"""Every ``hf:<type>:tiny`` name through the CLI: ``ampkit bench``, ``ampkit doctor`` and
``ampkit export`` in fp16 and bf16, one line per model and command.

The batches are the CLI's own (the models package's tokenizer-like ones: ``input_ids`` with a
padded ``attention_mask``, ``token_type_ids`` where the model takes them, pixel values, audio
features), so this is the path a user of the CLI takes. A failure prints the command's one
error line.

    python benchmarks/hf_cli_matrix.py                                   # the default models
    python benchmarks/hf_cli_matrix.py --models llama,bert --steps export-fp16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

MODELS = (
    "llama,qwen2,gemma,gpt_neox,opt,falcon,bert,roberta,deberta-v2,bart,t5,vit,whisper,clip,"
    "mixtral,qwen2_moe,mamba"
)
STEPS = "bench,doctor,export-fp16,export-bf16"


def command(model: str, step: str, out: Path) -> list[str]:
    name = f"hf:{model}:tiny"
    if step == "bench":
        return ["ampkit", "bench", "--model", name, "--steps", "3", "--warmup", "1",
                "--no-progress", "--json", f"{out}.json"]  # fmt: skip
    if step == "doctor":
        return ["ampkit", "doctor", "--model", name, "--steps", "1", "--no-progress",
                "--json", f"{out}.json"]  # fmt: skip
    precision = step.split("-")[1]
    return ["ampkit", "export", "--model", name, "--precision", precision, "--batches", "1",
            "--out", f"{out}.onnx", "--json", f"{out}.json", "--no-progress"]  # fmt: skip


def detail(step: str, out: Path) -> str:
    data = json.loads(Path(f"{out}.json").read_text())
    if step.startswith("export"):
        first = data["parity"][0]["outputs"][0]
        return f"passed={data['passed']} max_rel={first['max_rel']:.1e}"
    if step == "doctor":
        rec = data.get("recommendation", {})
        return f"recommends {rec.get('precision')} keep_fp32={rec.get('keep_fp32')}"
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--steps", default=STEPS)
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory(prefix="ampkit-hf-matrix-") as tmp:
        for model in args.models.split(","):
            for step in args.steps.split(","):
                out = Path(tmp) / f"{model}-{step}"
                start = time.perf_counter()
                run = subprocess.run(
                    command(model, step, out), capture_output=True, text=True, env=env,
                    timeout=900, check=False,
                )  # fmt: skip
                took = time.perf_counter() - start
                if run.returncode == 0:
                    said = detail(step, out)
                else:
                    said = (run.stderr.strip().splitlines() or ["?"])[-1][:200]
                print(f"{model:12s} {step:12s} exit {run.returncode} {took:5.1f} s  {said}")


if __name__ == "__main__":
    main()
