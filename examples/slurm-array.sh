#!/usr/bin/env bash
# One simulator sweep split over the tasks of a Slurm job array: task i runs shard i of the
# array (counted from the array's first index) and writes its partial output to the shared
# file system. Submit it, then merge once every task has finished:
#
#   jobid=$(sbatch --parsable examples/slurm-array.sh)
#   sbatch --dependency=afterok:$jobid --wrap 'sluice sim merge out/shen2008-fig21/shard-*'
#
# The shard count is the array's task count (SLURM_ARRAY_TASK_COUNT), so changing --array is
# all it takes to split the sweep differently. EXPERIMENT picks another experiment.
#SBATCH --job-name=sluice-sim
#SBATCH --array=1-4
#SBATCH --cpus-per-task=2
#SBATCH --output=slurm-%A_%a.log
set -euo pipefail

experiment=${EXPERIMENT:-shen2008-fig21}
exec sluice sim "$experiment" --shard env --jobs "${SLURM_CPUS_PER_TASK:-1}" \
    --out "out/$experiment/shard-$SLURM_ARRAY_TASK_ID"
