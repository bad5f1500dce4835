#!/bin/bash
# The few-step recipe over other corpora of the two-video task
# (docs/distillation.md, "Over other corpora"): for each corpus
# NAME:MODES:SAMPLES:SEED:TASK_SEED, a wan-mini teacher trained as the main
# job trains (data/run.ini), a 2-step student by data/fewstep.ini, and the
# nearest-video score of the teacher's 50 and 2 steps and the student's 2
# (the first two prompts, 16 seeds each), as that page scores them.
#   scripts/fewstep-corpora.sh [NAME:MODES:SAMPLES:SEED:TASK_SEED ...]
# Run from the repository root after scripts/build.sh release; about 5
# minutes a corpus on 2 cores.
set -euo pipefail
corpora=("$@")
[ ${#corpora[@]} -gt 0 ] || corpora=(a:2:4:5:0 b:2:4:11:0 c:3:6:5:0 d:2:4:23:1)
bin=build/release/apps
mpi="mpirun -np 2 --oversubscribe"
for corpus in "${corpora[@]}"; do
  IFS=: read -r name modes samples seed task <<< "$corpus"
  data=runs/corpora/$name/data teacher=runs/corpora/$name/teacher student=runs/corpora/$name/student
  rm -rf "runs/corpora/$name"
  mkdir -p "runs/corpora/$name"
  $bin/wandata/wandata synth --out $data --samples $samples --modes $modes --shards 2 --frames 3 --size 16x16 \
      --text-len 16 --text-dim 64 --seed $seed --task-seed $task > /dev/null
  $mpi $bin/wantrain/wantrain --config data/run.ini --data $data --output-dir $teacher --sample-every 0 \
      --val-every 0 > $teacher.log 2>&1
  $mpi $bin/wantrain/wantrain --config data/fewstep.ini --data $data --teacher $teacher/ema.safetensors \
      --output-dir $student > $student.log 2>&1
  score() {
    for index in 0 $modes; do for s in $(seq 0 15); do
      $bin/wansample/wansample "$@" --data $data --index $index --seed $s --compare \
          --out runs/corpora/$name/score.h5 | grep "videos in"
    done; done |
      sed -E 's/.*nearest \(sample ([0-9]+)\) correlation ([0-9.]+); their mean correlation ([0-9.]+)/\1 \2 \3/' |
      awk '{ n += $2; m += $3; c++ } END { printf "nearest %.3f  mean %.3f\n", n / c, m / c }'
  }
  t="--weights $teacher/ema.safetensors --model-config data/configs/wan-mini.json --cfg 2"
  echo "corpus $name (--modes $modes --samples $samples --seed $seed --task-seed $task)"
  echo "  teacher, 50 steps: $(score $t --shift 20 --steps 50)"
  echo "  teacher, 2 steps:  $(score $t --shift 20 --steps 2)"
  echo "  student, 2 steps:  $(score --checkpoint $student/latest)"
done
