#!/usr/bin/env bash
# The mutation check (docs/model-check.md): for each rule, the model check of the bound
# focused on it passes as the code is, and finds a counterexample with the rule turned off
# (mutations/<rule>.patch applied to the operator's source, reverted afterwards whatever
# happens). Prints one line per rule: found or not, and the trace's length.
# PROFILE (default dev) is the cargo profile the checker is built with.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PROFILE=${PROFILE:-dev}
RULES=${RULES:-first-process lowering release-ahead evidence clock member-clock}
dir=$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
bin=${CARGO_TARGET_DIR:-target}/$dir/model-check
applied=""
revert() { [ -n "$applied" ] && git apply -R "tests/model/mutations/$applied.patch"; applied=""; }
build() { ${CARGO:-cargo} build -q --profile "$PROFILE" -p redlock-model --bin model-check; }
# Reverted and built again whatever happens: the checker left behind is the unmutated one (a
# later `model-check` must not check a mutant).
trap 'revert; build' EXIT
# The focused bounds hold as the code is (BASELINE=0 skips this).
build
for rule in $([ "${BASELINE:-1}" = 1 ] && echo "$RULES"); do
  if ! out=$("$bin" "$rule" 2>&1); then
    echo "$out" | grep -q "^VIOLATED" && { echo "$out"; echo "FAIL: $rule's bound is violated without a mutation"; exit 1; }
  fi
  echo "unmutated $rule: $(echo "$out" | grep '^states explored' || true)"
done
table=""
for rule in $RULES; do
  git apply "tests/model/mutations/$rule.patch"
  applied=$rule
  build
  out=$("$bin" "$rule" 2>&1 || true)
  revert
  echo "$out" | sed -n '/^VIOLATED/,$p'
  found=$(echo "$out" | grep '^VIOLATED' | sed 's/^VIOLATED: //' | paste -sd';' - || true)
  table+="$rule: ${found:-NOT FOUND} | $(echo "$out" | grep '^states explored' || true)"$'\n'
done
printf '%s' "$table"
echo "$table" | grep -q "NOT FOUND" && exit 1 || true
