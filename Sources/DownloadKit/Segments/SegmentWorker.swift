import Glibc
import HTTPClient
import HTTPWire

/// A file descriptor handed to another thread: the background checkpoint's `fdatasync`, which the engine
/// waits for (`checkpointQueue.sync`) before it moves, removes or closes the file; hence
/// `@unchecked Sendable`.
struct SharedFile: @unchecked Sendable {
    let handle: FileHandleFD
}

/// The file as the segment workers write it: `pwrite` at each worker's own offsets (POSIX positional
/// I/O does not use the shared file offset), one worker at a time. The handle outlives every worker
/// (the coordinator joins them).
///
/// Why one at a time: the kernel serializes buffered writes to one file anyway (ext4, tmpfs and XFS
/// take the inode's lock exclusively for the whole copy), but its waiters spin on a running owner
/// before they sleep: with 16 connections on 2 vCPUs that spinning (`rwsem_spin_on_owner`) was 15–20 %
/// of the process's samples, and it slowed the owner's copy too; waiting on this user-space mutex
/// sleeps at once. By hand, 1 GiB over 16 capped connections into tmpfs: 1.5 CPU-s instead of 2.5–6.5
/// (perf, 3 alternating pairs), the same wall time (docs/BENCHMARKS.md, "Segment writes, one at a
/// time").
///
/// With ``DownloadConfiguration/directWrites`` (the default) the whole blocks of each write go
/// past the page cache through a second descriptor (``DirectFile``, cut by ``DirectWriteSplit``); the
/// rest, and everything on a file system outside ``DirectFile/fileSystems`` or one that refuses
/// `O_DIRECT`, goes through the page cache.
/// Either way a write returns only once its bytes are in the file, so the workers' claim, write, credit
/// order is unchanged.
///
/// The lock holds the files themselves, not `Void`: ThreadSanitizer attributed the access to a zero-sized
/// locked value to the lock object's first bytes and reported a race with a thread about to lock it.
struct SegmentFileWriter: Sendable {
    private struct Files {
        let handle: FileHandleFD
        var direct: DirectFile?
        var directBytes: Int64 = 0
    }

    private let files: LockedValue<Files>

    /// - Parameters:
    ///   - handle: The temp file, open for writing.
    ///   - direct: Whether to write whole blocks with `O_DIRECT` where the file system allows it.
    init(_ handle: FileHandleFD, direct: Bool) {
        files = LockedValue(Files(handle: handle, direct: direct ? DirectFile(sameFileAs: handle) : nil))
    }

    /// Whether whole blocks go past the page cache (false on other file systems, or after a refusal).
    var writesDirect: Bool { files.withLock { $0.direct != nil } }

    /// The bytes written past the page cache so far.
    var directBytes: Int64 { files.withLock { $0.directBytes } }

    /// Writes `bytes` at `offset` (all of them, or throws with `written` set to the prefix that reached
    /// the file), while no other worker writes.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64, written: inout Int) throws(FileSystemError) {
        written = 0
        try files.withLock { (files: inout Files) throws(FileSystemError) in
            guard let direct = files.direct else {
                return try files.handle.write(bytes, toAbsoluteOffset: offset, written: &written)
            }
            let split = DirectWriteSplit(
                offset: offset, count: bytes.count, alignment: DirectFile.alignment, minimumDirect: DirectFile.minimumWrite)
            try Self.buffered(bytes, 0..<split.head, at: offset, through: files.handle, written: &written)
            if split.direct > 0 {
                var part = 0
                defer {
                    written += part
                    files.directBytes += Int64(part)
                }
                let piece = UnsafeRawBufferPointer(rebasing: bytes[split.head..<(split.head + split.direct)])
                if try direct.write(piece, at: offset + Int64(split.head), written: &part) == .refused { files.direct = nil }
            }
            // The tail, and whatever of the middle a short or refused direct write left.
            try Self.buffered(bytes, written..<bytes.count, at: offset, through: files.handle, written: &written)
        }
    }

    /// Writes `range` of `bytes` through the page cache, adding what reached the file to `written`.
    private static func buffered(
        _ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, at offset: Int64, through handle: FileHandleFD, written: inout Int
    ) throws(FileSystemError) {
        guard !range.isEmpty else { return }
        var part = 0
        defer { written += part }
        try handle.write(
            UnsafeRawBufferPointer(rebasing: bytes[range]), toAbsoluteOffset: offset + Int64(range.lowerBound), written: &part)
    }
}

/// One segment worker: a thread that requests byte ranges of the segment it holds and writes them at
/// their offsets. It only executes: every rule (which segment, how many bytes may be written, what is
/// credited) is the board's (``SegmentBoardState``).
struct SegmentWorker: Sendable {
    let id: Int
    let board: SegmentBoard
    let file: SegmentFileWriter
    let journal: SegmentJournal?
    let client: DKHTTPClient
    let url: HTTPURL
    let headers: DKHTTPHeaders
    let ifRange: String?
    let entityTag: EntityTag?
    let total: Int64
    /// The retry rule (one per segment held, copied from this template).
    let retryPolicy: RetryPolicy
    let lowSpeedLimit: Int
    let lowSpeedTime: Double
    let bufferSize: Int
    let rateLimiters: [TokenBucket]
    let cancellation: CancellationToken
    let control: DownloadControl
    /// The shortest response wait of all this download's workers (``SendAheadRule/learned(shortestWait:)``).
    let sharedWait: SharedShortestWait

    /// Thrown from the body callback when the segment ends inside the bytes just received (its tail was
    /// stolen): the response is dropped with its connection, never written past the segment's end.
    private struct SegmentEnded: Error {}

    /// A segment request got an "expired URL" status: the engine asks the URL provider.
    private struct URLExpired: Error {
        let status: Int
    }

    /// The most one range request asks for: at 26 MB/s a 4 MiB request lasts about 160 ms, short
    /// enough that the tail is shared out, long enough that per-request costs stay negligible.
    static let requestSize: Int64 = 4 << 20

    /// How many bytes the current response may still owe when the next request is sent ahead: half a
    /// request, some 80 ms at 26 MB/s — more than a round trip on most paths, and the tail past the
    /// request in flight stays stealable until then.
    static let sendAheadOwed: Int64 = requestSize / 2

    func run() {
        let buffer = ReceiveBuffer(capacity: bufferSize)
        var lowSpeed = LowSpeedWindow(limit: lowSpeedLimit, seconds: lowSpeedTime)
        var sendAhead = SendAheadRule(requestSize: Self.requestSize)
        while let assignment = board.take(worker: id) {
            var retry = retryPolicy
            var position = assignment.position
            defer { board.release(assignment.handle, worker: id) }
            while board.remaining(assignment.handle, worker: id) > 0 {
                if board.stopReason != nil || control.stopRequest != .none { return }
                let before = position
                do {
                    try fetch(assignment.handle, from: &position, buffer: buffer, lowSpeed: &lowSpeed, sendAhead: &sendAhead)
                } catch is SegmentEnded {
                    break
                } catch let expired as URLExpired {
                    board.stop(.refreshURL(status: expired.status))
                    return
                } catch {
                    let failure = DownloadError.wrap(error)
                    if board.stopReason != nil || control.stopRequest != .none || failure.code == .cancelled { return }
                    if let restart = failure.restartReason {
                        board.stop(.restart(restart))
                        return
                    }
                    guard case .retry(let delay, _) = retry.next(after: failure, progress: position - before) else {
                        board.stop(.failed(failure))
                        return
                    }
                    lowSpeed.reset()
                    if !interruptibleSleep(delay, wakes: control.wakeUps, shouldStop: { board.stopReason != nil || control.stopRequest != .none }) {
                        return
                    }
                }
            }
        }
    }

    /// Range requests for the rest of the held segment, at most ``requestSize`` each, one after another
    /// on one connection. Where a round trip is a noticeable share of a request (``SendAheadRule``), the
    /// next is sent while the current response still owes at most ``sendAheadOwed`` bytes (HTTP/1.1
    /// pipelining), so the connection does not idle for a round trip between them. `position` is the
    /// segment's written end before and after; inside, the cursor always equals the offset of the
    /// response stream's next byte.
    private func fetch(
        _ handle: SegmentHandle, from position: inout Int64, buffer: ReceiveBuffer, lowSpeed: inout LowSpeedWindow,
        sendAhead: inout SendAheadRule
    ) throws {
        // Bounded requests keep the tail stealable: a sparing thief takes only what no request covers yet.
        guard let first = board.beginRequest(handle, worker: id, maximum: Self.requestSize),
            first.lowerBound == position
        else { return }
        // The ranges asked for and not yet answered, oldest first: the response being read is the first's.
        var asked = [first]
        var cursor = position
        var window = lowSpeed
        var rule = sendAhead
        defer {
            position = cursor
            lowSpeed = window
            sendAhead = rule
        }
        try client.execute(
            series: request(for: first), cancellation: cancellation, buffer: buffer,
            next: { owed in
                // Asked with 0 after a response that nothing was sent behind: the next request goes now.
                // A stopped board gives out no range.
                if owed > 0, owed <= Self.sendAheadOwed {
                    rule.bodyProgress(at: monotonicSeconds(), bytes: Int64(asked[0].count) - owed)
                    rule.learned(shortestWait: sharedWait.fold(rule.shortestWait))
                }
                guard owed == 0 || (owed <= Self.sendAheadOwed && rule.sendsAhead), control.stopRequest == .none,
                    let range = board.continueRequest(handle, worker: id, maximum: Self.requestSize)
                else { return nil }
                asked.append(range)
                return request(for: range)
            },
            onSent: { rule.sent(at: monotonicSeconds()) },
            onHead: { head in
                rule.headArrived(at: monotonicSeconds())
                rule.learned(shortestWait: sharedWait.fold(rule.shortestWait))
                try validate(head, requested: asked[0].lowerBound)
                return .stream
            },
            onBody: { bytes in
                // Claim, write, credit: the board never lets a steal cut below claimed bytes, and only what
                // reached the file is credited.
                let allowed = board.claim(handle, worker: id, at: cursor, count: bytes.count)
                guard allowed > 0 else { throw SegmentEnded() }
                var written = 0
                do {
                    try file.write(UnsafeRawBufferPointer(rebasing: bytes[0..<allowed]), at: cursor, written: &written)
                } catch {
                    credit(handle, at: &cursor, count: written)
                    throw error
                }
                // Fewer than received: the segment ends inside this buffer; the rest is not ours.
                if credit(handle, at: &cursor, count: allowed) < allowed || allowed < bytes.count { throw SegmentEnded() }
                if let rate = window.record(allowed, now: monotonicSeconds()) {
                    throw DownloadError(
                        .tooSlow,
                        "segment transfer too slow: \(Int(rate)) bytes/s for \(Int(lowSpeedTime)) s, below the limit of \(lowSpeedLimit) bytes/s",
                        isTransient: true)
                }
                if !TokenBucket.wait(rateLimiters, afterConsuming: allowed, wakes: control.wakeUps, shouldStop: { control.stopRequest != .none }) {
                    throw DownloadError(.cancelled, "stopped")
                }
            },
            onEnd: { summary in
                rule.responseEnded(at: monotonicSeconds(), bytes: summary.bodyBytes)
                let range = asked.removeFirst()
                // A response that ended before the bytes it promised (an empty 206, a short one) is a
                // transient failure: retried within the worker's bound, never re-requested forever (issue
                // #13, 4). A request sent ahead is dropped with the connection: its range starts past a gap.
                if cursor < range.upperBound, board.remaining(handle, worker: id) > 0 {
                    throw DownloadError(
                        .truncated,
                        "a segment response for bytes \(range.lowerBound)-\(range.upperBound - 1) ended after \(cursor - range.lowerBound) bytes",
                        isTransient: true)
                }
            })
    }

    /// The range request for `range`, with the validator that keeps every piece of one version.
    private func request(for range: Range<Int64>) -> DKHTTPRequest {
        var requestHeaders = headers
        requestHeaders.replaceOrAdd(
            name: "Range", value: RangeHeader(ranges: [.closed(first: range.lowerBound, last: range.upperBound - 1)]).headerValue)
        if let ifRange { requestHeaders.replaceOrAdd(name: "If-Range", value: ifRange) }
        return DKHTTPRequest(method: .GET, url: url, headers: requestHeaders)
    }

    /// Credits `count` written bytes at the cursor and journals them (after the write: a journalled byte
    /// is always in the file).
    @discardableResult
    private func credit(_ handle: SegmentHandle, at cursor: inout Int64, count: Int) -> Int {
        let credited = board.record(handle, worker: id, at: cursor, count: count)
        cursor = credited.upperBound
        journal?.append(credited)
        return credited.count
    }

    /// A 206 must cover exactly the asked start, carry the known total and the same validator;
    /// anything else is never written (issue #5: "a segment that comes back wrong is retried").
    private func validate(_ head: ResponseHead, requested: Int64) throws {
        let policy = RangeResponsePolicy(
            first: requested, knownEntityTag: entityTag, knownLastModified: nil, knownTotal: total)
        switch policy.decide(head) {
        case .write:
            return
        case .wholeBody(let reason), .restart(let reason):
            // A segment cannot take a whole body: start over (and probe again).
            throw DownloadError.restart(reason)
        case .complete:
            throw DownloadError.restart(.lengthChanged)
        case .retry(let detail):
            throw DownloadError(.contentRangeMismatch, "a segment: \(detail)", httpStatus: head.status, isTransient: true)
        case .other:
            if [401, 403, 404, 410].contains(head.status) { throw URLExpired(status: head.status) }
            throw DownloadError.status(head.status, reason: head.reason, url: url)
        }
    }
}

/// Validator rules of segmented transfers (the tag comparison itself is ``RangeResponsePolicy``'s).
enum SegmentRules {

    /// Why a resource must not be split, or nil: a weak ETag without Last-Modified leaves no validator that
    /// may go in `If-Range` (RFC 9110 §13.1.5), so segments could splice two versions.
    static func oneConnectionReason(entityTag: EntityTag?, lastModified: String?) -> String? {
        guard let entityTag, entityTag.isWeak, lastModified == nil else { return nil }
        return "the server's only validator is a weak ETag, which cannot protect range requests"
    }
}

/// curl's `--speed-limit`/`--speed-time` for one connection: below `limit` bytes/s averaged over
/// `seconds`, the transfer is too slow.
struct LowSpeedWindow: Sendable {
    let limit: Int
    let seconds: Double
    private var start = 0.0
    private var bytes: Int64 = 0

    init(limit: Int, seconds: Double) {
        self.limit = limit
        self.seconds = seconds
    }

    /// Counts `count` bytes at `now`; returns the window's rate when it closed below the limit.
    mutating func record(_ count: Int, now: Double) -> Double? {
        guard limit > 0 else { return nil }
        if start == 0 { start = now }
        bytes += Int64(count)
        let elapsed = now - start
        guard elapsed >= seconds else { return nil }
        let rate = Double(bytes) / elapsed
        start = now
        bytes = 0
        return rate < Double(limit) ? rate : nil
    }

    mutating func reset() {
        start = 0
        bytes = 0
    }
}

extension DownloadError {
    /// An internal signal that the partial data must be discarded and the download started over.
    static func restart(_ reason: RestartReason) -> DownloadError {
        var error = DownloadError(.serverIgnoredRange, "restart: \(reason.rawValue)")
        error.restartReason = reason
        return error
    }
}
