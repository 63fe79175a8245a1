#!/usr/bin/env bash
# The option table (tools/cli/options.c, docs/settings.md "The option table"): `lockstep options`
# prints it; every subcommand's -h lists exactly the spellings the table gives that subcommand;
# the table gives each subcommand the options written down below (llama-server's spellings
# among them); values outside an option's type or range, missing values, options of another
# subcommand and unknown options exit 2 with a message naming the option; the bounds of every
# range are accepted (the command then fails later, on the missing model: exit 1).
# Needs no model.
set -uo pipefail
CLI=${LOCKSTEP_CLI:?}
fail=0
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
NOMODEL="$T/no-such-model.gguf"
bad() { echo "FAIL: $*"; fail=1; }
# expect CODE PATTERN -- command...: exit code and stderr matching PATTERN (fixed string). The
# commands name a missing model, so an option wrongly accepted fails fast instead of generating.
expect() {
  local code=$1 pat=$2; shift 3
  local err; err=$(timeout 60 "$@" 2>&1 >/dev/null </dev/null); local rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -e "$pat" <<<"$err"; then
    bad "'$*' -> rc=$rc (want $code, stderr with '$pat'), stderr: $(head -3 <<<"$err")"
  fi
}

"$CLI" options >"$T/table.tsv" || bad "lockstep options exits $?"
head -1 "$T/table.tsv" | grep -q "^name	aliases	type" || bad "lockstep options: no header"
tail -n +2 "$T/table.tsv" >"$T/rows.tsv"
[ "$(wc -l <"$T/rows.tsv")" -ge 40 ] || bad "the table has only $(wc -l <"$T/rows.tsv") rows"

cmds="run tokenize logits bench probe serve"
rows_of() { awk -F'\t' -v c="$1" '{ n = split($7, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) print }' "$T/rows.tsv"; }
spellings_of() { rows_of "$1" | awk -F'\t' '{ print $1; if ($2 != "-") { n = split($2, a, ","); for (i = 1; i <= n; i++) print a[i] } }' | sort; }

# The contract: each subcommand's options (canonical names), besides the common ones.
common="--device --isa --no-cuda-graphs --no-probe-cache --verbose --help"
declare -A want
want[run]="--model --prompt --file --n-predict --threads --ctx-size --batch-size --chat --temp --top-k --top-p
  --min-p --repeat-penalty --repeat-last-n --frequency-penalty --presence-penalty --seed --ignore-eos --json-schema
  --json-schema-file --stats --draft
  --model-draft --draft-block-size --draft-ngram-min --draft-ngram-max --spec-sampling --no-adaptive --allow-inexact
  --trace --tensor-parallel"
want[tokenize]="--model --prompt --file --no-bos --no-special"
want[logits]="--model --prompt --file --tokens --mode --output --threads --ctx-size --tensor-parallel --tp-reduce"
want[bench]="--model --threads --n-prompt --n-gen --reps --verify --n-depth --ab-cuda-off --tensor-parallel
  --tp-reduce"
want[probe]="--model --threads --draft-block-size --trace --tensor-parallel"
want[serve]="--model --threads --ctx-size --batch-size --draft --model-draft --draft-block-size --allow-inexact --host
  --port --parallel --api-key --timeout --alias --queue-timeout --shutdown-timeout --header-timeout --no-webui
  --tensor-parallel"
for c in $cmds; do
  exp=$(tr ' ' '\n' <<<"${want[$c]} $common" | grep . | sort)
  got=$(rows_of "$c" | cut -f1 | sort)
  [ "$exp" = "$got" ] || bad "$c: the table gives $(comm -13 <(echo "$exp") <(echo "$got") | xargs) extra," \
    "lacks $(comm -23 <(echo "$exp") <(echo "$got") | xargs)"
  # no spelling names two options of one subcommand
  dup=$(spellings_of "$c" | uniq -d | xargs)
  [ -z "$dup" ] || bad "$c: spellings used twice: $dup"
  # -h: exit 0, on stdout, listing exactly the table's spellings for the subcommand
  "$CLI" "$c" -h >"$T/help" 2>"$T/help.err" || bad "$c -h exits $?"
  [ -s "$T/help.err" ] && bad "$c -h wrote to stderr"
  head -1 "$T/help" | grep -q "^usage: lockstep $c " || bad "$c -h: no usage line"
  listed=$(grep -E '^  -' "$T/help" |
    awk '{ for (i = 1; i <= NF; i++) { w = $i; sub(/,$/, "", w); if (w !~ /^-/) break; print w } }' | sort)
  [ "$listed" = "$(spellings_of "$c")" ] || bad "$c -h lists [$(xargs <<<"$listed")]," \
    "the table gives [$(spellings_of "$c" | xargs)]"
done

# llama-server / llama-cli spellings where they exist (and the old ones stay)
expect 2 "-s expects" -- "$CLI" run -m "$NOMODEL" -s abc
expect 2 "-np expects" -- "$CLI" serve -m "$NOMODEL" -np 0
expect 2 "-to expects" -- "$CLI" serve -m "$NOMODEL" -to 0
expect 2 "-c expects" -- "$CLI" serve -m "$NOMODEL" -c 0
expect 2 "--ctx-size expects" -- "$CLI" run -m "$NOMODEL" --ctx-size=0
expect 2 "--n-predict expects" -- "$CLI" run -m "$NOMODEL" --n-predict x
expect 2 "-n expects" -- "$CLI" run -m "$NOMODEL" -nx
expect 2 "--repetitions expects" -- "$CLI" bench -m "$NOMODEL" --repetitions 0
expect 2 "needs a value" -- "$CLI" run --temp
expect 2 "takes no value" -- "$CLI" run -m "$NOMODEL" --chat=yes
expect 2 "unknown option '--frobnicate'" -- "$CLI" serve -m "$NOMODEL" --frobnicate=1
expect 2 "--port is not an option of 'run' (only of: serve)" -- "$CLI" run -m "$NOMODEL" --port=80
expect 2 "unexpected argument 'extra'" -- "$CLI" probe -m "$NOMODEL" extra
# -b: one limit for run and serve
expect 2 "-b expects an integer in [1, 4096]" -- "$CLI" run -m "$NOMODEL" -b 4097
expect 2 "-b expects an integer in [1, 4096]" -- "$CLI" serve -m "$NOMODEL" -b 4097

# Every numeric option of every subcommand: a non-number and both sides of the range are
# refused naming the option; both bounds are accepted.
base_args() { # what lets the subcommand get past its own checks to the model load
  case $1 in
    tokenize) echo "-p hi" ;; logits) echo "--tokens 1" ;; serve) echo "--port 0" ;; *) echo "" ;;
  esac
}
n=0
for c in $cmds; do
  while IFS=$'\t' read -r name aliases type meta lo hi cm common_; do
    sp=$name; [ "$aliases" != "-" ] && sp=${aliases%%,*}
    case $type in
      int|float)
        x=("$CLI" "$c" -m "$NOMODEL")
        expect 2 "$sp expects" -- "${x[@]}" "$sp" notanumber
        below=$(awk -v x="$lo" 'BEGIN { print x - 1 }'); above=$(awk -v x="$hi" 'BEGIN { print x + 1 }')
        expect 2 "$sp expects" -- "${x[@]}" "$sp" "$below"
        expect 2 "$sp expects" -- "${x[@]}" "$sp" "$above"
        for v in "$lo" "$hi"; do
          [ "$name" = --port ] && continue # a fixed port may be taken; --port 0 is in base_args
          extra=""; [ "$name" = --draft-ngram-min ] && extra="--draft-ngram-max 64" # min <= max
          # shellcheck disable=SC2046,SC2086
          timeout 60 "$CLI" "$c" -m "$NOMODEL" $(base_args "$c") $extra "$sp" "$v" >/dev/null 2>"$T/err" </dev/null; rc=$?
          [ $rc -eq 1 ] && grep -q "cannot load model" "$T/err" || bad "$c $sp $v -> rc=$rc: $(head -2 "$T/err")"
        done
        n=$((n + 1)) ;;
      u64)
        expect 2 "$sp expects" -- "$CLI" "$c" -m "$NOMODEL" "$sp" -1
        expect 2 "$sp expects" -- "$CLI" "$c" -m "$NOMODEL" "$sp" 1.5
        n=$((n + 1)) ;;
      enum)
        expect 2 "$sp must be" -- "$CLI" "$c" -m "$NOMODEL" "$sp" no-such-choice
        n=$((n + 1)) ;;
    esac
  done < <(rows_of "$c")
done
[ $n -ge 40 ] || bad "only $n typed options checked"

# An option of another subcommand is refused, naming it and the subcommands that take it.
m=0
for c in $cmds; do
  mine=$(spellings_of "$c")
  for other in $cmds; do
    [ "$other" = "$c" ] && continue
    for sp in $(spellings_of "$other"); do
      grep -qxF -e "$sp" <<<"$mine" && continue
      expect 2 "$sp is not an option of '$c'" -- "$CLI" "$c" -m "$NOMODEL" "$sp" 1
      m=$((m + 1))
    done
  done
done
[ $m -ge 50 ] || bad "only $m foreign options checked"

# The common options, before or after the subcommand, and the top-level usage lists them.
expect 2 "--device must be cpu, cuda or auto, got 'tpu'" -- "$CLI" --device tpu tokenize -m "$NOMODEL" -p hi
expect 2 "--isa must be auto, avx2 or scalar, got 'x'" -- "$CLI" tokenize -m "$NOMODEL" -p hi --isa=x
"$CLI" help >"$T/main" || bad "lockstep help exits $?"
for o in $common; do
  [ "$o" = --help ] && continue
  grep -qE -e "^  $o( |$)" "$T/main" || bad "lockstep help does not list $o"
done
[ $fail -eq 0 ] && echo "PASS: option table ($n typed options, $m foreign options checked)"
exit $fail
