import Glibc

/// When a connection's reader should be woken (for bytes, or on TLS for ciphertext): the rule behind
/// its `SO_RCVLOWAT`, as a value.
///
/// Without a mark, `poll(2)` wakes the reader for every segment that lands, and on loopback or a fast
/// LAN a body then arrives in thousands of small reads (one GiB from nginx: 6,000–15,000 wake-ups;
/// curl's are of the same order). With a mark of 256 KiB the kernel wakes the reader once that much is
/// queued: 1 GiB in ~250 wake-ups, 0.14–0.23 s instead of 0.36–0.45 s and about half the CPU
/// (docs/BENCHMARKS.md, "To /dev/null: wake-ups, not copies").
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
/// One rule, one place: ``MarkedReadableWait`` asks it and performs the system calls for plain
/// connections and TLS sessions alike; the exchange only says how much of the body is left.
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

/// A socket's `SO_RCVLOWAT` and the rule that picks it: the effects of ``ReceiveLowWater``, shared by
/// plain connections (``Connection``) and TLS sessions (whose ciphertext waits use the same mark).
struct MarkedReadableWait {
    private var rule = ReceiveLowWater()
    /// The socket's mark as last set (1, the kernel's default, until changed).
    private(set) var currentMark = 1

    /// Waits until `fd` is readable, with the mark the rule picks for a body that still owes `remaining`
    /// bytes and a reader with `bufferCapacity` bytes of room. A marked wait that runs out of patience
    /// drops the mark and goes on waiting for any byte (bytes already there end it at once).
    /// - Throws: `.readTimeout` naming `peer` when `deadline` passes, `.systemCall` when `poll` fails.
    mutating func waitUntilReadable(
        _ fd: Int32, remaining: Int64?, bufferCapacity: Int, deadline: Deadline, peer: String
    ) throws(TransportError) {
        let mark = rule.mark(remaining: remaining, bufferCapacity: bufferCapacity)
        setMark(mark, on: fd)
        var result: Result<Int16?, DKErrno>
        if mark > 1 {
            let patience = Deadline(uptimeNanoseconds: Deadline.now().uptimeNanoseconds + ReceiveLowWater.patienceNanoseconds)
            result = Socket.poll(fd, for: .readable, deadline: min(deadline, patience))
            if case .success(nil) = result {
                rule.markedWaitTimedOut(now: Deadline.now().uptimeNanoseconds)
                setMark(1, on: fd)
                result = Socket.poll(fd, for: .readable, deadline: deadline)
            }
        } else {
            result = Socket.poll(fd, for: .readable, deadline: deadline)
        }
        switch result {
        case .success(.some):
            return
        case .success(.none):
            throw TransportError(.readTimeout, operation: "poll", detail: "no data arrived from \(peer) before the deadline")
        case .failure(let error):
            throw TransportError(
                .systemCall, errorNumber: error, operation: "poll", detail: "waiting for the socket failed: \(error)")
        }
    }

    /// A read returned `count` bytes.
    mutating func read(_ count: Int) {
        rule.read(count, now: Deadline.now().uptimeNanoseconds)
    }

    /// Back to waking for any byte (the end of a message: an idle kept-alive connection's stale check
    /// must see a single stray byte).
    mutating func endOfMessage(_ fd: Int32) {
        setMark(1, on: fd)
    }

    /// Sets `SO_RCVLOWAT` when it differs from what the socket has. A refusal leaves the mark as it was
    /// (the wait is then merely woken more often).
    private mutating func setMark(_ value: Int, on fd: Int32) {
        guard value != currentMark else { return }
        var mark = Int32(value)
        if setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &mark, socklen_t(MemoryLayout<Int32>.size)) == 0 {
            currentMark = value
        }
    }
}
