# Sourced by Scripts/test.sh and Scripts/test-fleet.sh: closecheck (Tests/Support/closecheck) built and read in one
# place. A close(2) of a descriptor that is not open, in the test process, is the visible half of a double
# close — whose other half closes someone else's socket or file.
#
#   closecheck_build DIR     compiles DIR/closecheck.so and clears DIR/closecheck.log (the caller preloads the
#                            one and names the other in CLOSECHECK_LOG)
#   closecheck_report DIR    prints DIR/closecheck.log and returns 1 when anything was closed twice
closecheck_source="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/Tests/Support/closecheck/closecheck.c"

closecheck_build() {
    local compiler
    compiler=$(command -v clang || command -v cc || command -v gcc) || { echo "closecheck: no C compiler (clang, cc, gcc)" >&2; return 1; }
    mkdir -p "$1"
    "$compiler" -Wall -Wextra -shared -fPIC -O1 -o "$1/closecheck.so" "$closecheck_source" -ldl || return 1
    rm -f "$1/closecheck.log"
}

closecheck_report() {
    [ -s "$1/closecheck.log" ] || return 0
    echo "descriptors closed twice (closecheck; symbolize with addr2line -f -C -e the .xctest):" >&2
    cat "$1/closecheck.log" >&2
    return 1
}
