import DownloadKitDecisions
import Foundation
import HTTPClient
import HTTPWire

/// Runs one segmented transfer of `[0, total)` for the engine (docs/ENGINE.md "Segments"): builds the
/// board from the saved map and the progress journal, starts the workers, publishes progress,
/// checkpoints and compacts the journal while they run, and proves full coverage at the end. Runs on
/// the engine's thread; the engine keeps the resume info and the checkpoints (``Hooks``).
struct SegmentCoordinator {
    /// What the engine provides: its checkpoint (which snapshots `board` before syncing) and progress.
    struct Hooks {
        /// Called once the board exists, before the first checkpoint.
        var started: (SegmentBoard) -> Void
        var checkpoint: (_ force: Bool) throws -> Void
        /// (bytes of the file present, bytes fetched by this run of the coordinator, open connections, now)
        var publish: (_ received: Int64, _ fetched: Int64, _ connections: Int, _ now: Double) -> Void
        /// Called each time the coordinator wakes up while workers run (for tests that count them).
        var woke: () -> Void = {}
    }

    /// What the run did, for the engine's accounting.
    struct Report {
        /// How the run ended (``SegmentRunOutcome``; failures and stops are thrown).
        var outcome: SegmentRunOutcome
        /// Bytes fetched over the network by this run.
        var fetched: Int64
        /// Bytes found written through the progress journal beyond the saved map.
        var recovered: Int64
        /// With mirrors: what each source gave (empty otherwise).
        var sources: [SourceUsage] = []
    }

    let total: Int64
    let file: FileHandleFD
    let tempPath: String
    let client: DKHTTPClient
    let configuration: DownloadConfiguration
    let control: DownloadControl
    let url: HTTPURL
    let headers: DKHTTPHeaders
    let ifRange: String?
    let entityTag: EntityTag?
    let rateLimiters: [TokenBucket]
    let bufferSize: Int
    /// `url` and the mirrors (docs/MIRRORS.md); one element or none: no mirrors.
    var sources: [DownloadSource] = []
    /// The first source's `Last-Modified`, which mirrors must match (``SourceScheduler``).
    var lastModified: String? = nil
    /// The request's piece checksums (``PieceVerifier``); nil: none.
    var pieces: PieceChecksums? = nil

    /// Split points with piece checksums: the piece length (so a steal never splits a piece and one source
    /// writes each piece) when it is a multiple of 64 KiB up to 16 MiB; else the usual 64 KiB.
    var alignment: Int64 {
        guard let length = pieces?.pieceLength, length % (64 << 10) == 0, length <= 16 << 20 else { return 64 << 10 }
        return length
    }

    /// The board for this run: the saved map plus what the journal proves, or a fresh plan (after a
    /// single-connection `prefix`). nil when the saved map is unusable.
    func makeBoard(saved: [ResumeSegment], prefix: Int64, workers: Int, minimum: Int64) throws -> (SegmentBoard.State, recovered: Int64)? {
        if !saved.isEmpty {
            let journal = SegmentJournal.read(path: SegmentJournal.path(forTempFile: tempPath), total: total)
            let size = try file.size()
            guard let plans = SegmentPlan.recover(saved: saved, journal: journal, fileSize: size, total: total),
                let withoutJournal = SegmentPlan.recover(saved: saved, fileSize: size, total: total)
            else { return nil }
            let state = SegmentBoard.State(plans: plans, minimumSegmentSize: minimum, alignment: alignment)
            let before = withoutJournal.reduce(0) { $0 + $1.written }
            return (state, state.written - before)
        }
        var plans = prefix > 0 ? [SegmentPlan(start: 0, end: prefix, written: prefix)] : []
        plans += SegmentPlan.split(
            from: prefix, total: total, count: workers, minimumSegmentSize: minimum, alignment: pieces == nil ? 1 : alignment)
        return (SegmentBoard.State(plans: plans, minimumSegmentSize: minimum, alignment: alignment), 0)
    }

    /// With piece checksums: the verifier for `state`'s credited bytes, and the board to run. The pieces
    /// the journal recorded as verified (under this piece table) are trusted; every other piece found
    /// written is hashed from the file: a good one is verified (not fetched again), a bad one's bytes are
    /// taken out of the board, to be fetched like any missing range.
    func checkResumedPieces(_ state: SegmentBoard.State, table: PieceChecksums, sourceCount: Int, minimum: Int64) throws -> (
        SegmentBoard.State, PieceVerifier
    ) {
        let runs = state.creditedRuns
        let verified = SegmentJournal.readVerified(
            path: SegmentJournal.path(forTempFile: tempPath), total: total, fingerprint: table.fingerprint)
        var verifier = PieceVerifier(pieceLength: table.pieceLength, total: total, sourceCount: sourceCount, runs: runs, verified: verified)
        var bad: [Range<Int64>] = []
        for piece in verifier.unchecked {
            let good = try PieceBoard.matches(piece, of: table, total: total, in: file)
            verifier.resumeChecked(piece, good: good)
            if !good { bad.append(verifier.range(of: piece)) }
        }
        guard !bad.isEmpty else { return (state, verifier) }
        configuration.logger?.warning("\(bad.count) resumed piece(s) failed their check; fetching them again")
        let plans = SegmentPlan.covering(SegmentPlan.subtract(bad, from: runs), fileSize: total, total: total)
        return (SegmentBoard.State(plans: plans, minimumSegmentSize: minimum, alignment: alignment), verifier)
    }

    /// Runs workers until every segment is written (then proves it), the board stops, or the caller
    /// stops. Throws failures and stops (after a checkpoint of what was written).
    func run(saved: [ResumeSegment], prefix: Int64, hooks: Hooks) throws -> Report {
        var workers = max(1, min(configuration.connections, client.configuration.maxConnectionsPerOrigin))
        let wakes = SegmentWakes(control.wakeUps)
        var sourceBoard: SourceBoard?
        if sources.count > 1 {
            // `connections` is the total, at least one per source; each source holds at most `perSource`.
            let perSource = max(1, min(configuration.connectionsPerSource, client.configuration.maxConnectionsPerOrigin))
            let board = SourceBoard(
                sources, reference: SourceBoard.Scheduler.Reference(total: total, lastModified: lastModified), perSource: perSource,
                wakes: wakes)
            workers = min(max(configuration.connections, sources.count), board.capacity)
            sourceBoard = board
        }
        let minimum = max(64 << 10, configuration.minimumSegmentSize)
        // Before any byte is written: a piece table that cannot describe this length is the caller's error.
        try pieces?.validate(total: total)
        guard var (state, recovered) = try makeBoard(saved: saved, prefix: prefix, workers: workers, minimum: minimum) else {
            return Report(outcome: .restart(.unusablePartialData), fetched: 0, recovered: 0)
        }
        var pieceBoard: PieceBoard?
        if let pieces {
            let (checked, verifier) = try checkResumedPieces(state, table: pieces, sourceCount: max(1, sources.count), minimum: minimum)
            recovered = max(0, recovered - (state.written - checked.written))
            state = checked
            pieceBoard = PieceBoard(pieces, total: total, verifier: verifier, file: file)
        }
        let board = SegmentBoard(state, wakes: control.wakeUps)
        hooks.started(board)
        // The map reaches disk (fsynced) before any byte of this run, then the journal starts over from it:
        // from the first byte on, a kill loses at most the buffers in flight.
        try hooks.checkpoint(true)
        let journalPath = SegmentJournal.path(forTempFile: tempPath)
        let verifiedPieces = { () -> SegmentJournal.VerifiedPieces? in
            pieceBoard.map { SegmentJournal.VerifiedPieces(fingerprint: $0.fingerprint, pieces: $0.verified) }
        }
        let journal = try SegmentJournal(path: journalPath, total: total, runs: board.creditedRuns(), pieces: verifiedPieces())

        control.setState(.segmented(connections: workers))
        let tokens = (0..<workers).map { _ in CancellationToken() }
        let writer = SegmentFileWriter(file, direct: configuration.directWrites)
        // Counted before any worker starts: a fast worker's first buffer must count as this run's.
        let writtenAtStart = board.written
        let sharedWait = SharedShortestWait()
        wakes.start(workers: workers)
        for index in 0..<workers {
            let worker = SegmentWorker(
                id: index, board: board, file: writer, journal: journal, client: client, url: url, headers: headers,
                ifRange: ifRange, entityTag: entityTag, total: total, retryPolicy: RetryPolicy(configuration),
                lowSpeedLimit: configuration.lowSpeedLimit, lowSpeedTime: configuration.lowSpeedTime.asSeconds,
                bufferSize: bufferSize, rateLimiters: rateLimiters, cancellation: tokens[index], control: control,
                sharedWait: sharedWait, wakes: wakes, sources: sourceBoard, pieces: pieceBoard)
            TransferThreads.shared.run(name: "dk-segment-\(index)") {
                worker.run()
                wakes.workerEnded()
            }
        }

        // The coordinator sleeps until there is something to do: a worker ended or dropped a source, the
        // caller or the board stopped (both wake `control.wakeUps`), or credited bytes reached the next
        // writeback, or — once everything credited is published — the next credited byte. Only the
        // time-based rules keep a deadline: progress at most every `progressInterval` (one look an interval
        // after each publish), a checkpoint at most every `interval` while bytes are not yet in one. A
        // stalled transfer soon has neither, so the coordinator sleeps through the stall.
        let interval = min(configuration.checkpointInterval.asSeconds, 1)
        let progressInterval = configuration.progressInterval.asSeconds
        let writebackInterval = Int64(TransferEngine.writebackInterval)
        var creditedAtLastWriteback: Int64 = 0
        var publishedCredited: Int64 = -1
        var checkpointedCredited: Int64 = 0
        var lastProgress = -Double.infinity
        var lastCheckpoint = monotonicSeconds()
        var cancelled = false
        func publishDrops() {
            guard let sourceBoard else { return }
            for (index, reason) in sourceBoard.takeDrops() {
                let source = sourceBoard.sources[index].url
                configuration.logger?.warning("dropping the source \(source): \(reason)")
                control.setState(.dropSource(source.listingDescription, reason))
            }
        }
        func publish(_ now: Double) {
            lastProgress = now
            hooks.publish(board.written, board.written - writtenAtStart, board.activeConnections, now)
        }
        while true {
            if control.stopRequest != .none { board.stop(.stopped) }
            if board.stopReason != nil && !cancelled {
                cancelled = true
                for token in tokens { token.cancel() }
            }
            publishDrops()
            let (running, credited) = wakes.progress
            if running == 0 { break }
            let now = monotonicSeconds()
            if credited != publishedCredited && now - lastProgress >= progressInterval {
                publishedCredited = credited
                publish(now)
            }
            if credited - creditedAtLastWriteback >= writebackInterval {
                file.startWriteback()
                creditedAtLastWriteback = credited
            }
            if credited != checkpointedCredited && now - lastCheckpoint >= interval {
                lastCheckpoint = now
                checkpointedCredited = credited
                do {
                    try hooks.checkpoint(false)
                    try journal.compact(board.creditedRuns, pieces: verifiedPieces)
                } catch {
                    board.stop(.failed(DownloadError.wrap(error)))
                    continue
                }
            }
            var seconds = Double.infinity
            var next = creditedAtLastWriteback + writebackInterval
            if now - lastProgress < progressInterval {
                // Published within the interval: look again when the next progress may go out.
                seconds = lastProgress + progressInterval - now
            } else {
                // Everything credited is published: the next credited byte is news.
                next = min(next, credited + 1)
            }
            if credited != checkpointedCredited { seconds = min(seconds, lastCheckpoint + interval - now) }
            wakes.wait(seconds: seconds, untilCredited: next) {
                (control.stopRequest != .none && board.stopReason == nil) || (board.stopReason != nil && !cancelled)
            }
            hooks.woke()
        }
        publishDrops()
        var report = Report(
            outcome: .complete, fetched: board.written - writtenAtStart, recovered: recovered,
            sources: usage(sourceBoard, pieceBoard, fetched: board.written - writtenAtStart))
        switch board.stopReason {
        case .restart(let reason)?:
            report.outcome = .restart(reason)
            return report
        case .refreshURL(let status)?:
            try? hooks.checkpoint(true)
            report.outcome = .refreshURL(status: status)
            return report
        case .failed(let failure)?:
            try? hooks.checkpoint(true)
            throw Failure(error: failure, report: report)
        case .stopped?:
            try? hooks.checkpoint(true)
            throw Failure(error: DownloadError(.cancelled, "stopped"), report: report)
        case nil:
            guard board.isComplete else {
                try? hooks.checkpoint(true)
                throw Failure(
                    error: DownloadError(.truncated, "the segment workers stopped before every byte arrived", isTransient: true),
                    report: report)
            }
        }
        // The accounting pass: every byte of [0, total) credited exactly once, or no success.
        if let gap = board.coverageGap(total: total) { throw Failure(error: DownloadError(gap), report: report) }
        if let pieceBoard, !pieceBoard.allVerified {
            throw Failure(
                error: DownloadError(.segmentAccounting, "segment accounting failed: a piece was written but never verified"),
                report: report)
        }
        publish(monotonicSeconds())
        return report
    }

    /// What each source gave: the source board's usage with each one's bad and re-fetched pieces; with
    /// piece checksums and one source, that source alone.
    private func usage(_ sourceBoard: SourceBoard?, _ pieceBoard: PieceBoard?, fetched: Int64) -> [SourceUsage] {
        var usage = sourceBoard?.usage() ?? []
        guard let pieceBoard else { return usage }
        if usage.isEmpty { usage = [SourceUsage(url: url.listingDescription, bytes: fetched)] }
        let counts = pieceBoard.counts()
        for index in usage.indices where counts.bad.indices.contains(index) {
            usage[index].badPieces = counts.bad[index]
            usage[index].refetchedPieces = counts.refetched[index]
        }
        return usage
    }

    /// A failure with the run's accounting (bytes fetched still count for this run).
    struct Failure: Error {
        let error: DownloadError
        let report: Report
    }
}

/// How segment workers wake their coordinator (``SegmentCoordinator/run(saved:prefix:hooks:)``): when one
/// ends, when a source is dropped, and when the bytes they credited reach the count the coordinator waits
/// for — one short lock per credited buffer, a wake-up only at that count. The sleep is on the download's
/// `wakeUps` (``WakeSignal``), which a stop request and a stopped board wake too.
final class SegmentWakes: Sendable {
    private struct State {
        var running = 0
        var credited: Int64 = 0
        /// The credited total that wakes the coordinator.
        var wakeAt = Int64.max
        /// A worker ended or dropped a source since the coordinator last looked.
        var poked = false
    }

    private let state = LockedValue(State())
    private let signal: WakeSignal

    init(_ signal: WakeSignal) {
        self.signal = signal
    }

    /// Before the workers start: how many will run.
    func start(workers: Int) { state.withLock { $0.running = workers } }

    /// A worker returned.
    func workerEnded() { poke { $0.running -= 1 } }

    /// A source was dropped: the coordinator announces it.
    func sourceDropped() { poke { _ in } }

    /// `count` bytes were credited.
    func credited(_ count: Int) {
        let reached = state.withLock { state in
            state.credited += Int64(count)
            guard state.credited >= state.wakeAt else { return false }
            state.wakeAt = .max
            return true
        }
        if reached { signal.wake() }
    }

    /// The workers still running and the bytes credited so far.
    var progress: (running: Int, credited: Int64) { state.withLock { ($0.running, $0.credited) } }

    /// Sleeps for at most `seconds` (infinity: until woken), ending early when a worker ends or drops a
    /// source, when `credited` bytes have been credited in all, or when `shouldStop` holds.
    func wait(seconds: Double, untilCredited credited: Int64, shouldStop: () -> Bool) {
        state.withLock { $0.wakeAt = credited }
        _ = signal.sleep(seconds) {
            let news = state.withLock { state in
                defer { state.poked = false }
                return state.poked || state.credited >= credited
            }
            return news || shouldStop()
        }
    }

    private func poke(_ change: (inout State) -> Void) {
        state.withLock { state in
            change(&state)
            state.poked = true
        }
        signal.wake()
    }
}
