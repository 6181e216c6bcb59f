#!/usr/bin/env bash
# The shipped what-if sweeps, simulated and drawn: NVMe and PCIe scaled on one DGX-2 for 1T, and 1T
# weak scaling to 4,096 GPUs on DGX-A100 and H200 nodes. CSVs in analysis/sweep/, the PNGs of the
# results page in docs/results/img/sweeps/ (PDFs beside the CSVs). About 25 s a sweep on 2 cores.
#   bash experiments/sweep/run.sh [NP]      # NP MPI ranks (default 2; 1 runs without mpirun)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
NP=${1:-2}
for spec in whatif-1t-nvme-pcie weak-scaling-1t; do
  rm -f "analysis/sweep/$spec.csv"  # a sweep resumes an existing CSV: start afresh
  if [ "$NP" -gt 1 ]; then
    mpirun -np "$NP" build/zinf sweep "experiments/sweep/$spec.yaml" -o "analysis/sweep/$spec.csv"
  else
    build/zinf sweep "experiments/sweep/$spec.yaml" -o "analysis/sweep/$spec.csv"
  fi
  /usr/bin/python3 analysis/sweep_report.py "analysis/sweep/$spec.csv" --img docs/results/img/sweeps
done
