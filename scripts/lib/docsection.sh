# docsection.sh: sourced by the scripts that write a generated section of
# docs/benchmarks.md (bench-kubelet, bench-cluster, bench-warm-pool,
# bench-handlers); gen-benchmarks-doc.sh keeps those sections as they are.

# doc_section DOC NAME FILE: FILE (a section from its "<!-- NAME: begin"
# line to its "<!-- NAME: end -->" line) takes the place of DOC's section
# NAME, or, if DOC has none, goes in before the stock guest's section (the
# doc's last, written by hand), or at the end.
doc_section() {
  local doc=$1 name=$2 file=$3 mode=insert
  grep -q "^<!-- $name: begin" "$doc" && mode=replace
  awk -v file="$file" -v m="$name" -v mode="$mode" '
    BEGIN { while ((getline l < file) > 0) body = body l "\n" }
    mode == "replace" && $0 ~ "^<!-- " m ": begin" { printf "%s", body; skip = 1; next }
    skip { if ($0 ~ "^<!-- " m ": end -->") skip = 0; next }
    mode == "insert" && !done && /^<!-- stock-guest: begin/ { printf "%s\n", body; done = 1 }
    { print }
    END { if (mode == "insert" && !done) printf "\n%s", body }' "$doc" > "$doc.tmp"
  mv "$doc.tmp" "$doc"
}
