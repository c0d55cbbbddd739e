/// When a plain connection's reader should be woken: the rule behind its `SO_RCVLOWAT`, as a value.
///
/// Without a mark, `poll(2)` wakes the reader for every segment that lands, and on loopback or a fast
/// LAN a body then arrives in thousands of small reads (one GiB from nginx: 6,000–15,000 wake-ups;
/// curl's are of the same order). With a mark of 256 KiB the kernel wakes the reader once that much is
/// queued: 1 GiB in ~250 wake-ups, 0.14–0.24 s instead of 0.36–0.45 s and about half the CPU
/// (docs/BENCHMARKS.md, "HTTP → /dev/null").
///
/// A mark must never hold back bytes a slow sender has already delivered, so it is used only
///
/// - while the body still owes at least twice the mark (``mark(remaining:bufferCapacity:)``: the last
///   stretch is read as it comes, and a body's end never waits for bytes that will not be sent), and
/// - with patience: a wait with the mark in place lasts at most ``patienceNanoseconds``. When the mark
///   was not reached in that time the stream is slower than a mark per patience (52 MB/s) and the
///   mark is dropped (``markedWaitTimedOut(now:)``). It comes back only when the reads show that rate
///   again over at least four patience intervals (``read(_:now:)``), so a capped or slow stream pays
///   one patient wait and then reads exactly as without a mark, and its progress, idle timeout and
///   low-speed window see bytes as soon as the kernel has them.
///
/// One rule, one place: ``Connection/read(into:deadline:remaining:)`` asks it and performs the system
/// calls; the exchange only says how much of the body is left.
struct ReceiveLowWater: Sendable, Equatable {
    /// The mark while a body streams fast: 256 KiB (64 KiB measured 0.24–0.28 s for the GiB above).
    static let fastMark = 256 << 10
    /// The longest a reader waits for the mark before reading what is there: 5 ms.
    static let patienceNanoseconds: UInt64 = 5_000_000

    /// Whether the stream has been fast enough for the mark (false after a patient wait ran out).
    private(set) var isEnabled = true
    /// While disabled: when the current measuring window began, and the bytes read since.
    private var windowStart: UInt64 = 0
    private var windowBytes: Int64 = 0

    /// The mark to wait with, given the bytes the body still owes (nil: unknown length, or not a
    /// body) and the reader's buffer: ``fastMark`` when enabled, the buffer can take it and at least two
    /// marks are still owed, else 1 (the kernel's default: wake for any byte).
    func mark(remaining: Int64?, bufferCapacity: Int) -> Int {
        guard isEnabled, let remaining, remaining >= 2 * Int64(Self.fastMark), bufferCapacity >= Self.fastMark else {
            return 1
        }
        return Self.fastMark
    }

    /// A wait with the mark in place ran out of patience at `now` (monotonic nanoseconds): the stream
    /// is slow; wake for any byte and start measuring.
    mutating func markedWaitTimedOut(now: UInt64) {
        isEnabled = false
        windowStart = now
        windowBytes = 0
    }

    /// A read returned `count` bytes at `now` (asked only while disabled). Once a window of at least
    /// four patience intervals has passed, the mark comes back if the window averaged a mark per
    /// patience or more; otherwise a new window begins.
    mutating func read(_ count: Int, now: @autoclosure () -> UInt64) {
        guard !isEnabled else { return }
        windowBytes += Int64(count)
        let current = now()
        let elapsed = current &- windowStart
        guard elapsed >= 4 * Self.patienceNanoseconds else { return }
        if Double(windowBytes) * Double(Self.patienceNanoseconds) >= Double(Self.fastMark) * Double(elapsed) {
            isEnabled = true
        } else {
            windowStart = current
            windowBytes = 0
        }
    }
}
