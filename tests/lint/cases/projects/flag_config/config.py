"""Run settings: the dtype option decides whether the run is mixed precision."""

import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
args = parser.parse_args()

dtype = args.dtype
mixed_precision = False
if dtype == "bfloat16":
    mixed_precision = True
