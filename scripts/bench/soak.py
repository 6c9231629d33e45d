"""Load and soak: >= 1000 requests through SpecDecoder in waves; tokens/s and memory per wave.

On an H200 (a few minutes):
    PYTHONPATH=. python scripts/bench/soak.py --device cuda --dtype bfloat16 --requests 1024 --concurrency 64 \
        --out OUT/soak.json
On a CPU, small: python scripts/bench/soak.py --tiny --requests 64 --concurrency 4 --max-new-tokens 16
Exits 1 when memory grew after warm-up (the verdict is in the JSON's summary), 2 on bad flags.
The logic lives in peagle_lab/bench/soak.py (tests/test_soak.py runs it small).
"""
import sys

from peagle_lab.bench.soak import main

if __name__ == "__main__":
    sys.exit(main())
