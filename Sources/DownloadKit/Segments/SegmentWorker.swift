import DownloadKitDecisions
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

    /// Reads `count` bytes at `offset` (bytes already credited: a mirror's sample is compared with them).
    func read(count: Int, at offset: Int64) throws(FileSystemError) -> [UInt8] {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, count), alignment: 64)
        defer { buffer.deallocate() }
        let done = try files.withLock { (files: inout Files) throws(FileSystemError) -> Int in
            var done = 0
            while done < count {
                let n = try files.handle.read(
                    into: UnsafeMutableRawBufferPointer(rebasing: buffer[done..<count]), fromAbsoluteOffset: offset + Int64(done))
                if n == 0 { break }
                done += n
            }
            return done
        }
        return Array(UnsafeRawBufferPointer(rebasing: buffer[0..<done]))
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
    /// The sources of a download with mirrors (docs/MIRRORS.md); nil: `url` is the only one.
    var sources: SourceBoard? = nil
    /// The piece checks of a download with piece checksums (``PieceVerifier``); nil: none.
    var pieces: PieceBoard? = nil

    /// Where the worker's requests go now: `url` (source 0, or the only one) or a mirror.
    private struct Target {
        /// The source's index on the ``SourceBoard``; nil without mirrors.
        let index: Int?
        let url: HTTPURL
        let headers: DKHTTPHeaders
        let ifRange: String?
        let entityTag: EntityTag?

        var isMirror: Bool { (index ?? 0) != 0 }
    }

    /// A mirror's answer disagreed (or it failed) and it was dropped: the worker leaves it.
    private struct SourceDropped: Error {}

    /// A mirror's answer agrees on the length but needs a sample before its bytes are written.
    private struct NeedsSample: Error {}

    /// Thrown from the body callback when the segment ends inside the bytes just received (its tail was
    /// stolen): the response is dropped with its connection, never written past the segment's end.
    private struct SegmentEnded: Error {}

    /// A piece this worker completed and has not settled yet (``settle(_:target:buffer:)``).
    private enum DuePiece {
        /// To be hashed and decided.
        case unchecked(Int)
        /// Decided bad: to be fetched again from this source.
        case refetch(Int, from: Int)
    }

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
        guard let sources else {
            _ = run(Target(index: nil, url: url, headers: headers, ifRange: ifRange, entityTag: entityTag),
                buffer: buffer, lowSpeed: &lowSpeed, sendAhead: &sendAhead)
            return
        }
        // A source for as long as it serves; when it is dropped, the next free one (``SourceScheduler/assign()``).
        while let index = sources.assign() {
            let target = target(index)
            lowSpeed.reset()
            sendAhead = SendAheadRule(requestSize: Self.requestSize)
            let leftSource = run(target, buffer: buffer, lowSpeed: &lowSpeed, sendAhead: &sendAhead)
            sources.release(index)
            if !leftSource { return }
        }
    }

    /// Where source `index`'s requests go: the first source keeps its validator, a mirror gets none.
    private func target(_ index: Int) -> Target {
        guard index != 0, let sources else {
            return Target(index: sources == nil ? nil : 0, url: url, headers: headers, ifRange: ifRange, entityTag: entityTag)
        }
        let source = sources.sources[index]
        return Target(index: index, url: source.url, headers: source.headers, ifRange: nil, entityTag: nil)
    }

    /// Takes segments and fetches them from `target` until there is nothing left (false) or the target
    /// was dropped (true: the worker may take another source).
    private func run(_ target: Target, buffer: ReceiveBuffer, lowSpeed: inout LowSpeedWindow, sendAhead: inout SendAheadRule) -> Bool {
        var retry = retryPolicy
        while true {
            if board.stopReason != nil || control.stopRequest != .none { return false }
            if let index = target.index, let sources {
                guard sources.isLive(index) else { return true }
                if sources.phase(index) == .sampling {
                    do {
                        guard try sample(target, buffer: buffer) else { return false }
                        retry = retryPolicy
                        continue
                    } catch is SourceDropped {
                        return true
                    } catch {
                        switch failed(error, target: target, retry: &retry, progress: 0, lowSpeed: &lowSpeed) {
                        case .again: continue
                        case .leaveSource: return true
                        case .stop: return false
                        }
                    }
                }
            }
            guard let assignment = board.take(worker: id) else { return false }
            retry = retryPolicy
            var position = assignment.position
            defer { board.release(assignment.handle, worker: id) }
            segment: while board.remaining(assignment.handle, worker: id) > 0 {
                if board.stopReason != nil || control.stopRequest != .none { return false }
                let before = position
                // Pieces this worker completed and did not verify inline (a bad one, or one completed on a
                // failing path): settled before anything else, whatever ended the fetch.
                var due: [DuePiece] = []
                var failure: (any Error)?
                do {
                    try fetch(
                        assignment.handle, from: &position, target: target, buffer: buffer, lowSpeed: &lowSpeed,
                        sendAhead: &sendAhead, due: &due)
                } catch {
                    failure = error
                }
                if !due.isEmpty {
                    switch settle(&due, target: target, buffer: buffer) {
                    case .again: break
                    case .leaveSource: return true
                    case .stop: return false
                    }
                }
                switch failure {
                case nil:
                    continue
                case is SegmentEnded:
                    break segment
                case is SourceDropped:
                    return true
                case is NeedsSample:
                    // The segment goes back to the board while the sample is fetched.
                    break segment
                case let expired as URLExpired where target.index == nil:
                    board.stop(.refreshURL(status: expired.status))
                    return false
                case let error?:
                    switch failed(error, target: target, retry: &retry, progress: position - before, lowSpeed: &lowSpeed) {
                    case .again: continue
                    case .leaveSource: return true
                    case .stop: return false
                    }
                }
            }
        }
    }

    /// What a worker does after a failure.
    private enum AfterFailure {
        /// Retry on the same source (the delay has passed).
        case again
        /// The source was dropped; others are left.
        case leaveSource
        /// The board stopped (or the caller did).
        case stop
    }

    /// A failure of `target`: retried within the retry rule, then — with mirrors — the source dropped
    /// (the download fails only when no source is left); without mirrors the download fails.
    private func failed(
        _ error: any Error, target: Target, retry: inout RetryPolicy, progress: Int64, lowSpeed: inout LowSpeedWindow
    ) -> AfterFailure {
        var failure = DownloadError.wrap(error)
        if let expired = error as? URLExpired {
            failure = DownloadError.status(expired.status, reason: "", url: target.url)
        }
        if board.stopReason != nil || control.stopRequest != .none || failure.code == .cancelled { return .stop }
        if let restart = failure.restartReason, !target.isMirror {
            board.stop(.restart(restart))
            return .stop
        }
        let slowRate = failure.code == .tooSlow ? failure.detail : nil
        if let index = target.index, let sources, slowRate != nil, sources.dropsWhenSlow(index) {
            return drop(index, .tooSlow(bytesPerSecond: Self.rate(in: failure.detail)), failure: failure)
        }
        guard failure.restartReason == nil, !(error is URLExpired),
            case .retry(let delay, _) = retry.next(after: failure, progress: progress)
        else {
            if let index = target.index { return drop(index, .failed(failure), failure: failure) }
            board.stop(.failed(failure))
            return .stop
        }
        lowSpeed.reset()
        if !interruptibleSleep(delay, wakes: control.wakeUps, shouldStop: { board.stopReason != nil || control.stopRequest != .none }) {
            return .stop
        }
        return .again
    }

    /// Drops source `index`; stops the board with `failure` when it was the last.
    private func drop(_ index: Int, _ reason: SourceDropReason, failure: DownloadError) -> AfterFailure {
        guard let sources, sources.failed(index, reason) else {
            var last = failure
            last.detail = "every source was dropped; the last, \(sources?.sources[index].url.description ?? url.description): \(failure.detail)"
            board.stop(.failed(last))
            return .stop
        }
        return .leaveSource
    }

    /// The bytes per second a too-slow error names (its first number).
    private static func rate(in detail: String) -> Int {
        let digits = detail.drop { !$0.isNumber }.prefix { $0.isNumber }
        return Int(digits) ?? 0
    }

    /// Fetches a sample of ``SourceScheduler/sampleSize`` bytes from a mirror where the file already holds
    /// credited bytes, and compares (docs/MIRRORS.md). Waits for such bytes; false when the download ended
    /// or stopped before. Throws ``SourceDropped`` when the mirror disagrees.
    private func sample(_ target: Target, buffer: ReceiveBuffer) throws -> Bool {
        guard let index = target.index, let sources else { return false }
        let size = min(SourceScheduler.sampleSize, total)
        var range: Range<Int64>?
        while range == nil {
            if board.stopReason != nil || control.stopRequest != .none || board.isComplete { return false }
            if let run = board.creditedRuns().first(where: { $0.count >= size }) {
                range = run.lowerBound..<run.lowerBound + size
            } else if !sources.hasAgreeingSource(besides: index) {
                // Nothing written to compare with, and no agreeing source left to write it: never proved.
                let failure = DownloadError(
                    .serverIgnoredRange, "\(target.url): \(SourceDropReason.unverifiable)")
                if case .stop = drop(index, .unverifiable, failure: failure) { return false }
                throw SourceDropped()
            } else if !interruptibleSleep(0.05, wakes: control.wakeUps, shouldStop: { board.stopReason != nil || control.stopRequest != .none }) {
                return false
            }
        }
        guard let range else { return false }
        var served: [UInt8] = []
        served.reserveCapacity(Int(size))
        try fetchExactly(range, from: target, buffer: buffer, what: "a sample") { bytes, _ in served.append(contentsOf: bytes) }
        let written = try file.read(count: Int(size), at: range.lowerBound)
        if case .drop = sources.sampled(index, range: range, equal: written == served) { throw SourceDropped() }
        return true
    }

    /// One range request for exactly `range` from `target` (a mirror's sample, a piece fetched again), its
    /// body handed to `consume` with each run's offset: the answer is checked as a segment's is (a mirror
    /// that still needs a sample is not sent for one again), never past the range, and complete — else a
    /// transient error naming `what`.
    private func fetchExactly(
        _ range: Range<Int64>, from target: Target, buffer: ReceiveBuffer, what: String,
        consume: (UnsafeRawBufferPointer, Int64) throws -> Void
    ) throws {
        var cursor = range.lowerBound
        _ = try client.execute(
            request(for: range, target: target), cancellation: cancellation, buffer: buffer,
            onHead: { head in
                try validate(head, requested: range.lowerBound, target: target, sampling: true)
                return .stream
            },
            onBody: { bytes in
                guard cursor + Int64(bytes.count) <= range.upperBound else {
                    throw DownloadError(.contentRangeMismatch, "\(what) ran past its range", isTransient: true)
                }
                try consume(bytes, cursor)
                cursor += Int64(bytes.count)
            })
        guard cursor == range.upperBound else {
            throw DownloadError(
                .truncated, "\(what) of bytes \(range.lowerBound)-\(range.upperBound - 1) ended after \(cursor - range.lowerBound) bytes",
                isTransient: true)
        }
    }

    /// Range requests for the rest of the held segment, at most ``requestSize`` each, one after another
    /// on one connection. Where a round trip is a noticeable share of a request (``SendAheadRule``), the
    /// next is sent while the current response still owes at most ``sendAheadOwed`` bytes (HTTP/1.1
    /// pipelining), so the connection does not idle for a round trip between them. `position` is the
    /// segment's written end before and after; inside, the cursor always equals the offset of the
    /// response stream's next byte.
    private func fetch(
        _ handle: SegmentHandle, from position: inout Int64, target: Target, buffer: ReceiveBuffer,
        lowSpeed: inout LowSpeedWindow, sendAhead: inout SendAheadRule, due: inout [DuePiece]
    ) throws {
        // Bounded requests keep the tail stealable: a sparing thief takes only what no request covers yet.
        guard let first = board.beginRequest(handle, worker: id, maximum: Self.requestSize),
            first.lowerBound == position
        else { return }
        // The ranges asked for and not yet answered, oldest first: the response being read is the first's.
        var asked = [first]
        var cursor = position
        var headAt = monotonicSeconds()
        var credited: Int64 = 0
        var window = lowSpeed
        var rule = sendAhead
        var completed: [Int] = []
        var decided: [DuePiece] = []
        let source = target.index ?? 0
        defer {
            due += decided + completed.map { .unchecked($0) }
            position = cursor
            lowSpeed = window
            sendAhead = rule
            if let index = target.index, credited > 0 {
                sources?.served(index, bytes: credited, seconds: monotonicSeconds() - headAt)
            }
        }
        try client.execute(
            series: request(for: first, target: target), cancellation: cancellation, buffer: buffer,
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
                return request(for: range, target: target)
            },
            onSent: { rule.sent(at: monotonicSeconds()) },
            onHead: { head in
                rule.headArrived(at: monotonicSeconds())
                rule.learned(shortestWait: sharedWait.fold(rule.shortestWait))
                try validate(head, requested: asked[0].lowerBound, target: target)
                headAt = monotonicSeconds()
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
                    credited += Int64(credit(handle, at: &cursor, count: written, source: source, completed: &completed))
                    throw error
                }
                // Fewer than received: the segment ends inside this buffer; the rest is not ours.
                let counted = credit(handle, at: &cursor, count: allowed, source: source, completed: &completed)
                credited += Int64(counted)
                try verify(&completed, decided: &decided, target: target)
                if counted < allowed || allowed < bytes.count { throw SegmentEnded() }
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

    /// The range request for `range` to `target`, with the validator that keeps every piece of one
    /// version (a mirror gets none: each of its answers is checked against the first source's instead).
    private func request(for range: Range<Int64>, target: Target) -> DKHTTPRequest {
        var requestHeaders = target.headers
        requestHeaders.replaceOrAdd(
            name: "Range", value: RangeHeader(ranges: [.closed(first: range.lowerBound, last: range.upperBound - 1)]).headerValue)
        if let ifRange = target.ifRange { requestHeaders.replaceOrAdd(name: "If-Range", value: ifRange) }
        return DKHTTPRequest(method: .GET, url: target.url, headers: requestHeaders)
    }

    /// Credits `count` written bytes at the cursor and journals them (after the write: a journalled byte
    /// is always in the file). With piece checksums, the pieces this completed go to `completed`.
    @discardableResult
    private func credit(_ handle: SegmentHandle, at cursor: inout Int64, count: Int, source: Int, completed: inout [Int]) -> Int {
        let credited = board.record(handle, worker: id, at: cursor, count: count)
        cursor = credited.upperBound
        journal?.append(credited)
        if let pieces { completed += pieces.credit(credited, from: source) }
        return credited.count
    }

    /// Checks the pieces just completed, inline (``PieceBoard``: hashed from the file): a good one is verified,
    /// a bad one's refetch waits in `decided` until this response series ends (its sender only demoted, the
    /// series goes on); when the decision drops this worker's own source, throws ``SourceDropped``.
    private func verify(_ completed: inout [Int], decided: inout [DuePiece], target: Target) throws {
        guard let pieces else { return }
        while let piece = completed.first {
            let next = decide(piece, good: try pieces.matches(piece), pieces: pieces)
            completed.removeFirst()
            switch next {
            case .verified: break
            case .refetch(let index): decided.append(.refetch(piece, from: index))
            case .fail: throw pieces.failure(piece)
            }
        }
        if let index = target.index, let sources, !sources.isLive(index) { throw SourceDropped() }
    }

    /// Applies the ``PieceVerifier``'s decision on a checked piece: demotes and drops its senders, journals
    /// a verified piece, stops the board when no source can give a good copy. Returns what comes next.
    private func decide(_ piece: Int, good: Bool, pieces: PieceBoard) -> PieceVerifier.Next {
        let decision = pieces.checked(piece, good: good, eligible: sources?.agreeing ?? [0])
        for index in decision.demote { sources?.demote(index) }
        for (index, count) in decision.drop.sorted(by: { $0.key < $1.key }) {
            _ = sources?.failed(index, .badPieces(count: count))
        }
        switch decision.next {
        case .verified: journal?.appendVerified(piece, fingerprint: pieces.fingerprint)
        case .fail: board.stop(.failed(pieces.failure(piece)))
        case .refetch: break
        }
        return decision.next
    }

    /// Settles the pieces this worker completed: an unchecked one is hashed and decided; a bad one is
    /// fetched again from the source the verifier names and hashed again, until it is verified — or no
    /// source can give a good copy, and the download fails naming the piece. Returns whether the worker
    /// goes on with `target`.
    private func settle(_ due: inout [DuePiece], target: Target, buffer: ReceiveBuffer) -> AfterFailure {
        guard let pieces else {
            due = []
            return .again
        }
        do {
            while let first = due.first {
                let piece: Int
                var next: PieceVerifier.Next
                switch first {
                case .unchecked(let index):
                    piece = index
                    next = decide(index, good: try pieces.matches(index), pieces: pieces)
                case .refetch(let index, let source):
                    piece = index
                    next = .refetch(from: source)
                }
                while case .refetch(let source) = next {
                    try refetch(piece, from: source, buffer: buffer)
                    next = decide(piece, good: try pieces.matches(piece), pieces: pieces)
                }
                if next == .fail { return .stop }
                due.removeFirst()
            }
        } catch {
            if board.stopReason == nil && control.stopRequest == .none { board.stop(.failed(DownloadError.wrap(error))) }
            return .stop
        }
        if let index = target.index, let sources, !sources.isLive(index) { return .leaveSource }
        return .again
    }

    /// Writes `piece` again from source `index` (one range request, retried within the retry rule; past
    /// it the download fails with the source's error). Its bytes stay credited: they are only replaced.
    private func refetch(_ piece: Int, from index: Int, buffer: ReceiveBuffer) throws {
        guard let pieces else { return }
        let range = pieces.table.range(ofPiece: piece, total: total)
        let target = target(index)
        var retry = retryPolicy
        while true {
            if board.stopReason != nil || control.stopRequest != .none { throw DownloadError(.cancelled, "stopped") }
            var progress: Int64 = 0
            do {
                try fetchExactly(range, from: target, buffer: buffer, what: PieceChecksums.name(piece, range) + " fetched again") { bytes, offset in
                    var written = 0
                    defer { progress += Int64(written) }
                    try file.write(bytes, at: offset, written: &written)
                }
                return
            } catch is SourceDropped {
                throw DownloadError(.serverIgnoredRange, "\(target.url): dropped while it sent \(PieceChecksums.name(piece, range)) again")
            } catch {
                let failure = DownloadError.wrap(error)
                guard failure.code != .cancelled, case .retry(let delay, _) = retry.next(after: failure, progress: progress)
                else { throw failure }
                if !interruptibleSleep(delay, wakes: control.wakeUps, shouldStop: { board.stopReason != nil || control.stopRequest != .none }) {
                    throw DownloadError(.cancelled, "stopped")
                }
            }
        }
    }

    /// A 206 must cover exactly the asked start, carry the known total and the same validator;
    /// anything else is never written (issue #5: "a segment that comes back wrong is retried").
    /// A mirror's answer is first the ``SourceScheduler``'s to judge (agreement with the first source).
    private func validate(_ head: ResponseHead, requested: Int64, target: Target, sampling: Bool = false) throws {
        if target.isMirror, let index = target.index, let sources, !(300..<400).contains(head.status) {
            var total: Int64?
            if head.status == 206, let text = head.headers.first(name: "Content-Range"),
                case .satisfied(_, _, let length)? = try? ContentRange(parsing: text)
            {
                total = length
            } else if head.status == 200 {
                total = try? head.contentLength()
            }
            if head.status == 200 || head.status == 206 {
                switch sources.answered(index, status: head.status, total: total, lastModified: head.headers.first(name: "Last-Modified")) {
                case .agree: break
                case .needsSample: if !sampling { throw NeedsSample() }
                case .drop: throw SourceDropped()
                }
            }
        }
        let policy = RangeResponsePolicy(
            first: requested, knownEntityTag: target.entityTag, knownLastModified: nil, knownTotal: total)
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
            if URLExpiry.statuses.contains(head.status) { throw URLExpired(status: head.status) }
            throw DownloadError.status(head.status, reason: head.reason, url: target.url)
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

extension DownloadError {
    /// An internal signal that the partial data must be discarded and the download started over.
    static func restart(_ reason: RestartReason) -> DownloadError {
        var error = DownloadError(.serverIgnoredRange, "restart: \(reason.rawValue)")
        error.restartReason = reason
        return error
    }
}
