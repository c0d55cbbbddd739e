import Glibc

/// A small body held in memory until it can be written in one piece, its whole blocks past the page
/// cache (``DirectFile``) — what a single-connection download does instead of splicing the body from the
/// socket into page-cache pages, when the body is between ``DirectFile/minimumWrite`` and
/// ``capacity`` bytes long (issue #18, docs/BENCHMARKS.md, "Small files: past the page cache").
///
/// Bytes are credited (progress, checkpoints, the resume record's claim) only once written, as on every
/// path: ``pending`` is what arrived and is not in the file yet. The engine writes it when the body is
/// whole, when its oldest byte has waited a progress interval (a slow or stalling link still shows
/// progress and feeds the low-speed limit), and when the exchange ends in any way, an error included, so a
/// connection that drops mid-body loses none of what arrived.
///
/// The buffer maps the file's 4 KiB blocks onto its own: file offset `x` sits at `x - base`, where `base`
/// is the block that holds the first pending byte. Aligned file offsets are thus aligned addresses, and
/// the direct part is written from this buffer without another copy.
final class SmallBodyGather {
    /// The largest buffer: bodies up to this size (less the offset's position in its block) are gathered.
    /// 256 KiB keeps the pool's worst case at ``AlignedBufferPool/limit`` × 256 KiB (8 MiB); larger bodies
    /// are spliced as before (a 1 MiB body spends far longer on the network than in the page cache).
    static let capacity = 256 << 10

    /// The bodies gathered: the machine decides from it (``DownloadStateMachine/BodyWrite/gather``), and a
    /// buffer is only made for one of them.
    static let rule = SmallBodyRule(minimum: DirectFile.minimumWrite, capacity: capacity, alignment: DirectFile.alignment)

    private let buffer: UnsafeMutableRawPointer
    /// The file offset of `buffer[0]` (a multiple of the alignment).
    private var base: Int64
    /// The file offset of the first pending byte, and the count pending.
    private(set) var start: Int64
    private(set) var count = 0
    /// When the oldest pending byte arrived (monotonic seconds; meaningless while none is pending).
    private(set) var oldestArrival = 0.0

    /// A gather for the `remaining` bytes of a body that starts at file offset `offset`, or nil when the
    /// body is outside the gathered sizes or no buffer is free (the caller splices then).
    init?(remaining: Int64, at offset: Int64) {
        let alignment = Int64(DirectFile.alignment)
        guard Self.rule.gathers(remaining: remaining, at: offset), let buffer = AlignedBufferPool.shared.take() else { return nil }
        self.buffer = buffer
        base = offset / alignment * alignment
        start = offset
    }

    deinit { AlignedBufferPool.shared.giveBack(buffer) }

    /// The bytes that arrived and are not written yet.
    var pending: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: buffer + Int(start - base), count: count)
    }

    /// Appends `bytes`, arrived at `now`; false (nothing appended) when they do not fit — write
    /// ``pending`` first.
    func append(_ bytes: UnsafeRawBufferPointer, now: Double) -> Bool {
        let end = Int(start - base) + count
        guard bytes.count <= Self.capacity - end else { return false }
        if count == 0 { oldestArrival = now }
        if let source = bytes.baseAddress { (buffer + end).copyMemory(from: source, byteCount: bytes.count) }
        count += bytes.count
        return true
    }

    /// The free space after the pending bytes, at most `limit` bytes: where the next bytes of the body are
    /// received in place (``BodyDisposition/receiveInPlace(_:)``). Empty only when the buffer is full.
    func freeSpace(limit: Int) -> UnsafeMutableRawBufferPointer {
        let end = Int(start - base) + count
        return UnsafeMutableRawBufferPointer(start: buffer + end, count: max(0, min(limit, Self.capacity - end)))
    }

    /// Takes `received` bytes that arrived at `now` into ``freeSpace(limit:)``'s space as pending.
    func received(_ received: Int, now: Double) {
        precondition(received >= 0 && received <= Self.capacity - (Int(start - base) + count))
        if count == 0 && received > 0 { oldestArrival = now }
        count += received
    }

    /// Marks the first `written` pending bytes as in the file; the next ones start at the block that
    /// holds the new first pending byte, and count as arrived at `now` (they are newer than the written ones).
    func consumed(_ written: Int, now: Double) {
        let next = start + Int64(written)
        let remaining = count - written
        let alignment = Int64(DirectFile.alignment)
        let newBase = next / alignment * alignment
        if remaining > 0, newBase != base {
            (buffer + Int(next - newBase)).copyMemory(from: buffer + Int(next - base), byteCount: remaining)
        }
        base = newBase
        start = next
        count = remaining
        if remaining > 0 { oldestArrival = now }
    }
}

/// Page-aligned buffers of ``SmallBodyGather/capacity`` bytes, reused across transfers: a fresh one for
/// every small file would be a new mapping whose pages are touched, and faulted in, each time — the
/// very cost gathering avoids. At most ``limit`` exist at once; beyond that a transfer splices.
final class AlignedBufferPool: Sendable {
    static let shared = AlignedBufferPool(limit: 32)

    /// The most buffers handed out and kept together.
    let limit: Int

    private struct State: @unchecked Sendable {  // the pointers are only handed out under the lock
        var free: [UnsafeMutableRawPointer] = []
        var existing = 0
    }

    private let state = LockedValue(State())

    init(limit: Int) {
        self.limit = limit
    }

    /// A free buffer, a new one while fewer than ``limit`` exist, else nil.
    func take() -> UnsafeMutableRawPointer? {
        enum Choice { case reuse(UnsafeMutableRawPointer), allocate, none }
        let choice: Choice = state.withLock { state in
            if let buffer = state.free.popLast() { return .reuse(buffer) }
            guard state.existing < limit else { return .none }
            state.existing += 1
            return .allocate
        }
        switch choice {
        case .reuse(let buffer): return buffer
        case .none: return nil
        case .allocate:
            var allocated: UnsafeMutableRawPointer?
            guard posix_memalign(&allocated, DirectFile.alignment, SmallBodyGather.capacity) == 0, let allocated else {
                state.withLock { $0.existing -= 1 }
                return nil
            }
            return allocated
        }
    }

    /// Keeps `buffer` for the next transfer.
    func giveBack(_ buffer: UnsafeMutableRawPointer) {
        state.withLock { $0.free.append(buffer) }
    }
}
