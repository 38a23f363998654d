#!/usr/bin/env bash
# Mutation testing of the pure core with mutmut 3 (docs/testing.md, "Mutation testing"):
# each module is mutated alone and run against its own unit test files only; prints
# killed/total per module. Slow (minutes per module) and not run in CI.
#
#   scripts/mutation.sh                 every module below, one at a time
#   scripts/mutation.sh dblog scd2      only these
#
# Each module runs in a copy of the work tree under .mutation/<name>/ (git-ignored), whose
# setup.cfg holds that module's [mutmut] section, so the repository's own configuration and
# test run stay as they are; mutmut's mutants/ lives inside that copy. Survivors are listed
# in .mutation/<name>/survivors.txt (`cd .mutation/<name> && ../../.venv/bin/mutmut show
# NAME` prints one). Needs `.venv/bin/pip install mutmut` (measured with 3.8.1).
# Env: MUTATION_CHILDREN (parallel mutants, default 2), MUTATION_SEED (hypothesis seed, 0),
# MUTATION_COMMIT (mutate that commit's tree instead of the work tree), MUTATION_MINUTES (stop a module's run after this many minutes and report the mutants
# checked so far; default 0: no limit). Hypothesis runs its "mutation" profile
# (tests/conftest.py): no shrinking, a failing example is enough.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MUTMUT=$ROOT/.venv/bin/mutmut
[ -x "$MUTMUT" ] || { echo "mutation.sh: no $MUTMUT; run .venv/bin/pip install mutmut" >&2; exit 2; }

# name | module file | its unit test files (space separated) | functions counted (a regex on
# the mutant's function name; empty: all)
MODULES=(
  "changelog|merger/history/changelog.py|tests/unit/test_history_changelog.py|"
  "changelog_fresh|merger/history/changelog_fresh.py|tests/unit/test_changelog_fresh.py|"
  "change|merger/history/change.py|tests/unit/test_history_change.py tests/unit/test_history_changelog.py|"
  "batch_order|merger/batch/order.py|tests/unit/test_batch_order.py|"
  "position|cdc/wire/position.py|tests/unit/test_position_filters.py tests/unit/test_shard_positions.py tests/unit/test_replay_filter.py|"
  # repair's key rule only: which keys a repair asks for and deletes (its SQL text, key_list_where
  # and window_where, is left out)
  "repair_keys|merger/snapshot/repair.py|tests/unit/test_repair_plan.py tests/unit/test_repair_keys.py|repair_plan|is_key_list|chunk_keys|asked_table|deletes_table|differing_keys|_source_key"
  "scd2|merger/history/scd2.py|tests/unit/test_history_scd2.py tests/unit/test_history_scd2_edges.py|"
  "dblog|merger/dblog.py|tests/unit/test_dblog.py tests/unit/test_dblog_repair.py tests/unit/test_dblog_edges.py|"
  "failover|ingest/failover.py|tests/unit/test_failover.py tests/unit/test_failover_edges.py|"
  "shard_cutover|cdc/shard_cutover.py|tests/unit/test_shard_cutover.py tests/unit/test_shard_cutover_edges.py tests/unit/test_ingest_cutover.py tests/unit/test_verify_sharded.py|"
)

want=("$@")
summary=()
for spec in "${MODULES[@]}"; do
  IFS='|' read -r name module tests functions <<<"$spec"
  if [ ${#want[@]} -gt 0 ] && [[ ! " ${want[*]} " =~ " $name " ]]; then continue; fi
  dir=$ROOT/.mutation/$name
  rm -rf "$dir"
  mkdir -p "$dir"
  if [ -n "${MUTATION_COMMIT:-}" ]; then
    git archive "$MUTATION_COMMIT" | tar -xf - -C "$dir"  # a commit's tree (figures before a change)
  else
    # the work tree as it is (tracked and new files, not ignored ones)
    git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$dir"
  fi
  existing=()
  for t in $tests; do [ -f "$dir/$t" ] && existing+=("$t"); done
  {
    echo "[mutmut]"
    # every package is copied (tests import them from mutants/), only the module is mutated
    printf 'source_paths =\n    cdc\n    ingest\n    merger\n'
    echo "only_mutate = $module"
    printf 'also_copy =\n    schemas\n'  # besides tests/: files the tests read
    echo "pytest_add_cli_args_test_selection ="
    for t in "${existing[@]}"; do echo "    $t"; done
    printf 'pytest_add_cli_args =\n    -p\n    no:cacheprovider\n    --hypothesis-profile=mutation\n    --hypothesis-seed=%s\n' "${MUTATION_SEED:-0}"
  } >"$dir/setup.cfg"
  echo "== $name: $module against ${existing[*]}"
  start=$(date +%s)
  # its own process group, so that a time limit stops mutmut and its workers together
  (cd "$dir" && exec setsid "$MUTMUT" run --max-children "${MUTATION_CHILDREN:-2}" >run.log 2>&1) &
  pid=$!
  limit=$((${MUTATION_MINUTES:-0} * 60))
  cut=""
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$limit" -gt 0 ] && [ $(($(date +%s) - start)) -ge "$limit" ]; then
      kill -TERM -- "-$pid" 2>/dev/null || true
      sleep 5
      kill -KILL -- "-$pid" 2>/dev/null || true
      cut=" (stopped after ${MUTATION_MINUTES} min: partial)"
      break
    fi
    sleep 5
  done
  if ! wait "$pid" && [ -z "$cut" ]; then
    echo "mutation.sh: mutmut run failed for $name (see $dir/run.log)" >&2
    tail -c 2000 "$dir/run.log" >&2
    continue
  fi
  (cd "$dir" && "$MUTMUT" results --all true >results.txt 2>&1)
  line=$(python3 - "$dir/results.txt" "$module" "$functions" "$dir/survivors.txt" <<'EOF'
import re, sys
results, module, functions, survivors_path = sys.argv[1:]
prefix = module[:-3].replace("/", ".") + "."
counts, survivors = {}, []
for raw in open(results):
    m = re.match(r"\s*(\S+): (.+)$", raw)
    if not m or not m.group(1).startswith(prefix):
        continue
    mutant, status = m.group(1), m.group(2).strip()
    # a function's mutants are named x_NAME__mutmut_N, a method's xǁCLASSǁNAME__mutmut_N
    if functions and not re.search(rf"(^x_|ǁ)(?:{functions})__mutmut_\d+$", mutant[len(prefix):]):
        continue
    counts[status] = counts.get(status, 0) + 1
    if status not in ("killed", "timeout", "not checked"):
        survivors.append(f"{mutant}: {status}")
with open(survivors_path, "w") as out:
    out.write("".join(s + "\n" for s in survivors))
unchecked = counts.pop("not checked", 0)
total = sum(counts.values())
killed = counts.get("killed", 0) + counts.get("timeout", 0)
pct = 100.0 * killed / total if total else 0.0
others = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k not in ("killed",))
partial = f" of the {total} checked ({unchecked} not checked)" if unchecked else ""
print(f"{killed}/{total} killed ({pct:.1f} %){partial}{'; ' + others if others else ''}")
EOF
)
  secs=$(($(date +%s) - start))
  echo "   $name: $line in ${secs}s$cut"
  summary+=("$(printf '%-12s %-32s %s' "$name" "$module" "$line")")
done
echo
echo "mutation testing (killed includes timeouts):"
for s in "${summary[@]}"; do echo "  $s"; done
