#!/usr/bin/env bash
# Keeps the pure folders of src/ pure (docs/design.md §6): they take facts and a clock as
# arguments and return decisions, so a table test can run them, and a reconcile's I/O stays in
# reconcile/, redis/ and runtime/ where the safety order is written down.
#
# A file under one of PURE fails the check when its production part (the lines above its
# first `#[cfg(test)]`; files under a tests/ folder are left out: tests may build what they
# like) names
#   - I/O: `async fn`, `.await`, `tokio::`, or a kube client (`kube::Client`, `Client::`,
#     `Api<`, `kube::Api`: no watch or request runs without one). Watch *events* are data
#     (children/index.rs folds them) and are allowed;
#   - a module of the I/O layers (`crate::reconcile`, `crate::redis`, `crate::runtime`,
#     `crate::controller`).
# ALLOWED lists the known exceptions, one `file:pattern` each, with the reason beside it.
# Usage: tests/tools/pure-check.sh [SRC_DIR]   (prints each offence; exit 1 when any)
set -euo pipefail

src="${1:-src}"
PURE=(crd hold clock credentials children decide)

io='async fn|\.await\b|\btokio::|kube::Client|\bClient::|\bApi<|kube::Api\b'
layers='crate::(reconcile|redis|runtime|controller)\b'

# file (under src/):pattern. Each is a seam still to cut (issue 48).
ALLOWED=(
  # A resting cluster's `Rest` carries the admin handle its watch probes with; the cut is for
  # the reconcile to hand `(Rest, AdminAccess)` to `rest_watch::spawn` instead.
  "decide/at_rest.rs:crate::redis::admin::AdminAccess"
)

allowed() {
  local file=$1 line=$2 entry
  for entry in "${ALLOWED[@]}"; do
    [[ "$file" == "${entry%%:*}" && "$line" == *"${entry#*:}"* ]] && return 0
  done
  return 1
}

status=0
for dir in "${PURE[@]}"; do
  while IFS= read -r -d '' path; do
    file=${path#"$src"/}
    # The production part only: up to the first `#[cfg(test)]`.
    while IFS= read -r hit; do
      number=${hit%%:*}
      line=${hit#*:}
      # A comment may name what it does not do.
      [[ "$line" =~ ^[[:space:]]*// ]] && continue
      allowed "$file" "$line" && continue
      echo "src/$file:$number: not pure: $line"
      status=1
    done < <(awk '/^[[:space:]]*#\[cfg\(test\)\]/ { exit } { print NR ":" $0 }' "$path" |
      grep -E ":.*($io|$layers)" || true)
  done < <(find "$src/$dir" -name '*.rs' -not -path '*/tests/*' -not -name tests.rs -print0)
done
if [ $status -eq 0 ]; then
  echo "pure-check: ${PURE[*]} name no I/O and no I/O layer"
fi
exit $status
