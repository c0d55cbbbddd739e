// Shared helpers for the libFuzzer targets in Fuzz/. Scripts/fuzz.sh compiles every Fuzz*.swift file and
// the library sources they exercise into one module and one binary (Fuzz/FuzzMain.swift picks the target).

/// Traps (and so reports the input to libFuzzer) when a property does not hold. `fatalError` rather than
/// `precondition`, whose message -O builds leave out.
func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError("property violated: \(message())") }
}

/// A tiny deterministic generator (SplitMix64) driven by fuzzer-chosen seed bytes.
struct SplitMix64 {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A value in 1...upper.
    mutating func next(atMost upper: Int) -> Int { Int(next() % UInt64(upper)) + 1 }
}
