#!/usr/bin/env bash
# Builds and runs the units most exposed to memory and threading bugs under a sanitizer, in a
# build directory of their own (CMakePresets.json): `asan` (AddressSanitizer + UBSan: the config
# readers and their fuzz targets with the corpus in tests/fuzz/corpus/, the NVMe store, checkpoints,
# data, safetensors, the one writer of outputs, the trainer) or
# `tsan` (ThreadSanitizer: the NVMe store's rings and completion threads, the pinned pool, the
# staging cache, the executor's lanes). Only these targets are built, to keep CI's time bounded.
#   bash scripts/sanitize.sh asan|tsan
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:?usage: sanitize.sh asan|tsan}
exclude='^$'
case "$preset" in
  asan)
    targets=(config_test nvme_store_test checkpoint_dir_test trainer_test data_loader_test safetensors_test
             output_file_test fuzz_run_config fuzz_deepspeed fuzz_hwprofile fuzz_model_spec fuzz_safetensors fuzz_token_bin
             fuzz_sweep_spec fuzz_checkpoint_meta fuzz_lr_schedule fuzz_tokenizer)
    tests='^(config_test|nvme_store_test|checkpoint_dir_test|trainer_test|data_loader_test|safetensors_test|output_file_test):|^fuzz_'
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ;;
  tsan)
    targets=(nvme_store_test pinned_pool_test staging_cache_test gpt_executor_test)
    tests='^(nvme_store_test|pinned_pool_test|staging_cache_test|gpt_executor_test):'
    # The pool's seccomp test forbids every system call, and TSan's runtime makes some: it hangs.
    exclude='no system call'
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ;;
  *) echo "sanitize.sh: unknown preset '$preset' (asan or tsan)" >&2; exit 2 ;;
esac
start=$(date +%s)
cmake --preset "$preset" > /dev/null
cmake --build "build-$preset" -j"$(nproc)" --target "${targets[@]}"
built=$(date +%s)
(cd "build-$preset" && ctest --output-on-failure -j"$(nproc)" -R "$tests" -E "$exclude" --timeout 600)
echo "sanitize.sh $preset: build $((built - start)) s, tests $(( $(date +%s) - built )) s"
