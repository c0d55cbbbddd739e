import DownloadKitDecisions
import Foundation
import Glibc
import HTTPClient
import HTTPWire

/// One download of one URL to one destination, run synchronously on a dedicated thread (see
/// docs/ENGINE.md): the executor of ``DownloadStateMachine``. Every decision — which request to send,
/// what a response means for the partial data, whether to retry, restart, refresh the URL or finish —
/// is the machine's; this class performs its actions (requests, writes, truncation, space reservation,
/// checkpoints, waits, the final rename) and reports what happened back to it.
///
/// The durable bytes in the temp file are the truth; the resume info is a checkpoint of them that
/// never claims more than has been `fdatasync`ed. Not `Sendable`: it lives on its thread.
final class TransferEngine {
    let request: DownloadRequest
    let configuration: DownloadConfiguration
    let control: DownloadControl
    private let suppliedClient: DKHTTPClient?

    /// The decisions, and what is known about the resource and the partial data.
    private var machine: EngineMachine

    // Where the working files are.
    private var workingDirectory = ""
    private var tempPath = ""
    private var infoPath = ""
    private var destinationPath: String?

    // The partial data on disk.
    private var file: FileHandleFD?
    private var durableOffset: Int64 = -1
    private var created = Date()
    private var digest: DKDigest?
    private var infoDirty = true
    /// Whether a `.dkresume` file may exist: it was there when the download opened, or a checkpoint wrote
    /// it. Until then the first record lives on the partial (``ResumeInfo/store(onPartial:hooks:)``).
    private var recordFileMayExist = false

    // Per-run accounting.
    private var bytesThisRun: Int64 = 0
    private var speed = SpeedMeter()
    private var lastProgressTime = 0.0
    private var lastCheckpointTime = 0.0
    private let rateLimiters: [TokenBucket]
    /// Bytes written since writeback was last started (see `didWrite`).
    private var unflushedBytes = 0
    /// Start writeback after this many bytes (8 MiB).
    static let writebackInterval = 8 << 20

    /// The file destination and what was there when the run began, as the machine was told
    /// (``examineDestination()``): a kept file's result is made of it.
    private var existing: (path: String, found: ExistingFileRule.Found)?

    /// Whether a response may name the file (a directory destination), so its heads are read for a name.
    private var namesFromResponses: Bool {
        if case .directory = request.destination { true } else { false }
    }

    /// The live segment map while segment workers run (docs/ENGINE.md, "Segments").
    private var activeBoard: SegmentBoard?
    /// The request's mirrors, parsed (docs/MIRRORS.md).
    private let mirrors: [HTTPURL]
    /// What each source gave in the last segmented run (empty without mirrors).
    private var sourceUsage: [SourceUsage] = []

    // Background checkpoints: `fdatasync` of a fast stream can take a while, so periodic checkpoints
    // run on their own queue and never stall the receive loop. Forced ones (head, pause, stop) wait
    // for it and run inline.
    private let checkpointQueue = SerialThread()
    private let backgroundCheckpoint = BackgroundCheckpointState()

    init(request: DownloadRequest, configuration: DownloadConfiguration, control: DownloadControl, client: DKHTTPClient?)
        throws(DownloadError)
    {
        self.request = request
        self.configuration = configuration
        self.control = control
        self.suppliedClient = client
        let url = try DownloadError.validatedURL(of: request)
        mirrors = try DownloadError.validatedMirrors(of: request)
        try request.pieceChecksums?.validate()
        machine = EngineMachine(url: url, settings: EngineMachine.Settings(request, configuration, mirrors: mirrors))
        rateLimiters = (configuration.rateLimit.map { [TokenBucket(bytesPerSecond: $0)] } ?? []) + configuration.sharedRateLimiters
    }

    // MARK: - Running

    /// Runs to the end: returns the result or throws the final error (paused and cancelled included).
    ///
    /// Everything `run` calls before and after the transfer (``examineDestination()``, ``prepare()``,
    /// ``stop(with:)``) is kept out of line, and so is ``transfer(using:)``: this frame stays on the stack
    /// under every exchange, and with them inlined it held all their temporaries — 8 KiB (docs/BENCHMARKS.md,
    /// "Stacks at 1,024 transfers").
    func run() throws(DownloadError) -> DownloadResult {
        // A kept destination ends the run before anything else: no client, no request, no working file.
        if let kept = examineDestination() { return kept }
        let client: DKHTTPClient
        do {
            client = try suppliedClient ?? DKHTTPClient(configuration: configuration.client, logger: configuration.logger)
        } catch {
            throw DownloadError.wrap(error)
        }
        do {
            try prepare()
            let result = try transfer(using: client)
            return result
        } catch {
            let failure = DownloadError.wrap(error)
            try stop(with: failure)
        }
    }

    /// Ends a run that did not complete: keeps partial data (checkpointed) unless cancelled.
    @inline(never)  // out of `run`'s frame (``run()``)
    private func stop(with failure: DownloadError) throws(DownloadError) -> Never {
        // A background checkpoint must not write the plist after the files are removed or moved.
        checkpointQueue.settleBlocking()
        // Read once: the disposal and the error thrown must describe the same request.
        let stopRequest = control.stopRequest
        let stop: StopPolicy.Stop =
            switch stopRequest {
            case .cancel: .cancel
            case .pause: .pause
            case .none: .failure(failure.stopVerdict)
            }
        switch ask({ $0.stopped(stop, holdsLock: file != nil, hasWorkingFile: !tempPath.isEmpty) }) {
        case .remove:
            removeWorkingFiles()
        case .keep:
            try? checkpoint(force: true)
            control.setResumeData(try? currentResumeInfo().encoded())
        case .leave:
            break
        }
        // Free the partial before the end is reported: whoever waits for it may start the next transfer of
        // this download at once (a manager restarting a task with new sources), and must find it unlocked.
        if let file { PartialFileLock.release(file) }
        switch stopRequest {
        case .cancel:
            file = nil
            control.setState(.cancel)
            throw DownloadError(.cancelled, "the download was cancelled; its partial data was removed")
        case .pause:
            control.setState(.pause)
            throw DownloadError(
                .paused, "the download was paused at \(ask({ $0.resource }).offset) bytes; resume data is available")
        case .none:
            control.setState(.fail(failure))
            throw failure
        }
    }

    /// Removes the partial, its record and its journal, then closes the partial. Unlinks while the lock
    /// is held (`file` open), so no second writer can lock the doomed file; only the writer holding it
    /// may call this.
    private func removeWorkingFiles() {
        try? FileSystem.remove(tempPath, hooks: configuration.fileIO)
        try? FileSystem.removeIfOwned(infoPath, hooks: configuration.fileIO)
        SegmentJournal.remove(forTempFile: tempPath)
        file = nil
    }

    /// Tells the machine what is at a file destination (``ExistingFileRule/Found``, looked at only when the
    /// policy asks, ``ExistingFileRule/looks(_:)``) and performs its answer: the kept file's result, or nil
    /// to download — a conditional first request's conditions travel on the machine's requests.
    @inline(never)  // out of `run`'s frame (``run()``)
    private func examineDestination() -> DownloadResult? {
        let policy = request.existingFile.rule
        if ExistingFileRule.looks(policy), case .file(let path) = request.destination {
            existing = ExistingFileRule.Found.at(path, partial: workingFiles.partial).map { (path, $0) }
        }
        switch machine.existingDestination(existing?.found, policy: policy) {
        case .keep: return keptResult()
        case .download, .askFirst: return nil
        }
    }

    /// The download's working files, named after the URL it was created with (before a record is adopted).
    private var workingFiles: WorkingFiles {
        WorkingFiles(destination: request.destination, workingDirectory: request.workingDirectory, url: ask({ $0.originalURL }))
    }

    /// The result of a run that keeps the destination as it was found (``examineDestination()``).
    private func keptResult() -> DownloadResult? {
        existing.map { DownloadResult.kept($0.path, $0.found, url: request.url) }
    }

    // MARK: - Preparing the partial data

    @inline(never)  // out of `run`'s frame (``run()``)
    private func prepare() throws {
        var resumeInfo: ResumeInfo?
        if let data = request.resumeData {
            do {
                resumeInfo = try ResumeInfo.decode(data)
            } catch {
                throw DownloadError(.invalidResumeData, "the resume data cannot be used: \(error)")
            }
        }

        let destinationDirectory: String
        switch request.destination {
        case .file(let path):
            // No file name is decided from a response: the caller chose this one. A path that names no file
            // ("", "/", "dir/", "..") would put the working files beside the wrong directory or nowhere.
            let name = FileSystem.lastComponent(of: path)
            guard !path.hasSuffix("/"), !name.isEmpty, name != ".", name != ".." else {
                throw DownloadError(.fileSystem, "the destination \"\(path)\" names no file")
            }
            destinationPath = path
            destinationDirectory = FileSystem.directory(of: path)
        case .directory(let directory, _):
            destinationDirectory = directory
        }
        try FileSystem.createDirectories(destinationDirectory)
        let working = workingFiles
        workingDirectory = working.directory
        tempPath = working.partial
        infoPath = working.resumeInfo
        // Usually the same directory (the working files sit beside the destination): one stat, not two.
        if workingDirectory != destinationDirectory { try FileSystem.createDirectories(workingDirectory) }

        recordFileMayExist = FileSystem.exists(infoPath)
        if resumeInfo == nil, recordFileMayExist {
            // A corrupt or foreign plist is not fatal: the machine then restarts unless a validator proves
            // the bytes. The `.dkresume` file, when there is one, is newer than the partial's own record.
            // It is trusted only when this user wrote it (issue #44, docs/ENGINE.md "Files beside a
            // destination"): another user's record is never read, nor any path it names.
            switch ResumeInfo.readRecord(at: infoPath) {
            case .trusted(let info): resumeInfo = info
            case .refused(let why): configuration.logger?.info("not resuming from the record: \(why); the download starts over")
            case .absent: break
            }
        }
        // Apple resume data names its own temp file; adopt it when it is there and ours is not. Only a file
        // of ours in the working directory qualifies (docs/RESUME-INFO.md, "Paths"): a planted record must
        // never move another file into place, and the rename never replaces a partial that appeared since.
        if let info = resumeInfo, info.tempFilePath != tempPath, !FileSystem.exists(tempPath) {
            RecordPath.adopt(info.tempFilePath, as: tempPath, in: workingDirectory)
        }
        var replacementURL: HTTPURL?
        if let replacement = request.replacementURL {
            do {
                replacementURL = try HTTPURL(replacement)
            } catch {
                throw DownloadError(.invalidURL, "invalid replacement URL \(HTTPURL.redacting(replacement)): \(error.detail)")
            }
        }

        // A partial already there, even empty, means a writer may have died here (below).
        let partialWasThere = FileSystem.exists(tempPath)
        // The partial is checked on its open descriptor (ours, not writable by others, one link) before
        // a byte is read from or written to it.
        let (handle, size) = try PartialFileLock.openLocked(
            tempPath, destination: destinationPath ?? FileSystem.directory(of: tempPath), hooks: configuration.fileIO)
        file = handle
        // The partial's own record, read from the descriptor just checked.
        if resumeInfo == nil { resumeInfo = ResumeInfo.stored(onPartialDescriptor: handle.fd) }
        let record = resumeInfo.map(MachineRecord.init)
        if let info = resumeInfo, let record {
            machine.adopt(record)
            created = info.created
        }
        if let replacementURL { machine.replaceURL(replacementURL) }
        // Under the lock no other live process writes this download's records: stale temporary ones are
        // swept now, and only when a writer can have died here (it leaves its partial or its record). An
        // empty partial counts: a run killed while it wrote its first record, before a body byte (a
        // segmented run's first checkpoint), left one and the record's temporary file beside it.
        if partialWasThere || size > 0 || recordFileMayExist { ResumeInfo.removeStaleTemporaryFiles(for: infoPath) }
        let sameBoot = resumeInfo?.bootID != nil && resumeInfo?.bootID == FileSystem.bootID
        let plan = machine.partialData(fileLength: size, record: record, sameBoot: sameBoot)
        if plan.truncates { try handle.truncate(to: plan.keep) }
        durableOffset = plan.durableOffset ?? -1
        if let count = plan.hashPrefix, let checksum = request.checksum {
            let digest = DKDigest(checksum.algorithm)
            try hashPrefix(into: digest, count: count, from: handle)
            self.digest = digest
        }
    }

    private func hashPrefix(into digest: DKDigest, count: Int64, from handle: FileHandleFD) throws {
        try handle.hash(0..<count, into: digest)
    }


    // MARK: - Executing the machine's actions

    @inline(never)  // out of `run`'s frame (``run()``)
    private func transfer(using client: DKHTTPClient) throws -> DownloadResult {
        let buffer = ReceiveBuffer(capacity: receiveBufferSize(client))
        var decision = machine.start()
        // Each action is performed by a function of its own, never inlined here: this loop's frame stays on
        // the stack under every exchange, on every transfer thread, and with the actions inlined it was 7 KiB
        // where 3.6 KiB do (docs/BENCHMARKS.md, "Stacks at 1,024 transfers").
        while true {
            // A retry's checkpoint comes before its `retrying` state is published.
            if case .retry = decision.next { try? checkpoint(force: true) }
            perform(decision.effects)
            switch decision.next {
            case .send(let request, let restart):
                decision = exchange(request, restart: restart, client: client, buffer: buffer)
            case .runSegments(let run):
                decision = segmentStep(run, client: client)
            case .askForURL(let context):
                decision = askForURL(context)
            case .retry(let seconds, _, _), .backOff(let seconds):
                decision = try wait(seconds)
            case .finalize:
                switch finalizeStep() {
                case .placed(let result): return result
                case .refused(let next): decision = next
                }
            case .keepExisting:
                return try keepExisting()
            case .fail(let failure):
                throw failure
            }
        }
    }

    @inline(never)
    private func segmentStep(_ run: EngineMachine.SegmentRun, client: DKHTTPClient) -> Decided {
        step { try self.runSegments(run, client: client) }
    }

    @inline(never)
    private func askForURL(_ context: URLRefreshContext) -> Decided {
        let fresh = configuration.urlProvider.flatMap { provider in
            ThreadBridge.wait(until: .distantFuture) { await provider(context) } ?? nil
        }
        return machine.urlProvided(fresh, jitter: Self.jitter())
    }

    /// A retry's or a back-off's wait; a stop ends it and the run.
    @inline(never)
    private func wait(_ seconds: Double) throws -> Decided {
        if !interruptibleSleep(seconds, wakes: control.wakeUps, shouldStop: { self.control.stopRequest != .none }) {
            try endedByStopRequest()
        }
        return machine.retryDelayElapsed()
    }

    @inline(never)
    private func finalizeStep() -> Finished {
        var result: DownloadResult?
        let decided = step {
            switch try self.finalize() {
            case .placed(let placed):
                result = placed
                return Decided(effects: [], next: .finalize)
            case .refused(let decided):
                return decided
            }
        }
        if let result { return .placed(result) }
        return .refused(decided)
    }

    @inline(never)
    private func keepExisting() throws -> DownloadResult {
        guard let kept = keptResult() else {
            throw DownloadError(.internalError, "a 304 kept a file no conditional request asked about")
        }
        checkpointQueue.settleBlocking()
        removeWorkingFiles()
        return kept
    }

    /// Reads the machine in place: every question to it goes through here. Read as `machine.x`, the
    /// machine — a value of the decisions module, generic over its error, stored in this class — was copied
    /// whole to be read (1 KB, a retain and a release of each reference in it): a call that may reach this
    /// class again cannot be lent the stored value. Through `inout` it is lent, not copied — as long as what
    /// is called is a stored property or a `mutating` member: a computed property or a non-mutating method
    /// of the machine, unspecialised across the module boundary, still got a copy of the whole value on the
    /// caller's stack (the frames' layout, `clang -Rpass-analysis=stack-frame-layout` on the module's IR,
    /// 2026-11-30), which is why the machine's questions are `mutating` and its `resource` is stored.
    private func ask<Answer>(_ question: (inout EngineMachine) -> Answer) -> Answer {
        question(&machine)
    }

    /// Runs an effect that yields the next action; a failure goes to the machine, which retries or gives up.
    private func step(_ body: () throws -> Decided) -> Decided {
        do {
            return try body()
        } catch {
            return machine.failed(DownloadError.wrap(error), stopRequested: control.stopRequest != .none, jitter: Self.jitter())
        }
    }

    /// An answer of the machine to an event whose next step is an action of the loop.
    private typealias Decided = EngineMachine.Decision<EngineMachine.Action>

    /// Performs the machine's verdict on what was just observed: nil to go on, else the machine's answer to
    /// its failure (reported with ``DownloadStateMachine/failed(_:stopRequested:jitter:)``), which ends the
    /// step.
    private func perform(_ verdict: EngineMachine.Verdict) -> Decided? {
        switch verdict {
        case .goOn: return nil
        case .fail(let failure): return failed(failure)
        }
    }

    /// The machine's answer to a failure of the current step.
    private func failed(_ failure: DownloadError) -> Decided {
        machine.failed(failure, stopRequested: control.stopRequest != .none, jitter: Self.jitter())
    }

    /// Ends an exchange in flight whose head the machine abandoned or whose bytes it refused, carrying the
    /// machine's answer to that failure: the client ends an exchange only when one of its callbacks throws.
    /// ``exchange(_:restart:client:buffer:)`` takes the answer back as the step's; it never reaches the
    /// machine as an error.
    private struct ExchangeRefused: Error {
        let answer: Decided
    }

    /// Performs a verdict on the bytes of the exchange in flight: a failure is answered by the machine and
    /// ends the exchange (``ExchangeRefused``).
    private func performInExchange(_ verdict: EngineMachine.Verdict) throws(ExchangeRefused) {
        guard case .fail(let failure) = verdict else { return }
        try refuse(failure)
    }

    /// The refusal of bytes in an exchange: the machine's answer to the failure ends the exchange. Not
    /// inlined: its answer and the error carrying it would sit in the frames of the body callbacks, at the
    /// bottom of a transfer thread's stack, on every chunk.
    @inline(never)
    private func refuse(_ failure: DownloadError) throws(ExchangeRefused) -> Never {
        throw ExchangeRefused(answer: failed(failure))
    }

    /// Performs the effects the machine decided, in order. Not inlined into the loops that call it: its
    /// transitions' mapping would add its temporaries to their frames, which stay on the stack under every exchange.
    @inline(never)
    private func perform(_ effects: [EngineMachine.Effect]) {
        for effect in effects {
            switch effect {
            case .publish(let transition): control.setState(DownloadTransition(transition))
            case .recordChanged: infoDirty = true
            case .resumable(let resumable): control.isResumable = resumable
            }
        }
    }

    /// Sends one request and streams its body as the machine decides; returns the machine's next action.
    @inline(never)
    private func exchange(
        _ request: MachineRequest, restart: RestartReason?, client: DKHTTPClient, buffer: ReceiveBuffer
    ) -> Decided {
        let httpRequest = DKHTTPRequest(method: .GET, url: request.url, headers: request.headers)
        return step {
            do {
                return try send(httpRequest, restart: restart, client: client, buffer: buffer)
            } catch let refused as ExchangeRefused {
                return refused.answer
            }
        }
    }

    /// The exchange itself: a head the machine abandons and bytes it refuses end it with ``ExchangeRefused``.
    private func send(
        _ httpRequest: DKHTTPRequest, restart: RestartReason?, client: DKHTTPClient, buffer: ReceiveBuffer
    ) throws -> Decided {
        if control.stopRequest != .none { try endedByStopRequest() }
        guard let file else { throw DownloadError(.fileSystem, "the temp file is not open") }
        if restart != nil { try discardPartialData() }
        var writing = false
        var partDigest: DKDigest?
        var gathered: GatheredBody?
        defer { gathered = nil }  // the buffer goes back to the pool
        /// Reports `count` more body bytes to the machine before they are taken. Gathered bytes are not
        /// credited yet: they count too.
        func checkBodyLimit(_ count: Int) throws {
            try performInExchange(ask({ $0.bodyArriving(Int64(gathered?.body.count ?? 0) + Int64(count)) }))
        }
        do {
            _ = try client.execute(
                httpRequest, cancellation: control.cancellation, buffer: buffer,
                onHead: { head in
                    // Only a directory destination takes a name from a response: a file destination's heads are
                    // not parsed for one (the machine would not read it).
                    let suggested = self.namesFromResponses ? FileNaming.suggestedFileName(for: head, at: httpRequest.url) : nil
                    let decision = self.machine.responseHead(
                        head, suggestedFileName: suggested, wallClock: Int64(Date().timeIntervalSince1970))
                    self.perform(decision.effects)
                    switch decision.next {
                    case .discard:
                        return .discard
                    case .abandon(let failure):
                        throw ExchangeRefused(answer: self.failed(failure))
                    case .write(let plan):
                        if plan.restart != nil { try self.discardPartialData() }
                        if let reservation = plan.reserve { try self.reserve(reservation) }
                        if plan.hashesMD5 { partDigest = DKDigest(.md5) }
                        // Nothing needs to see the bytes (no digest, no Content-MD5, no rate limit, no write
                        // fence): let the kernel move them from the socket to the file (plain HTTP,
                        // Content-Length bodies). A manager's buckets are there but unlimited until a limit is
                        // set; one set mid-body still holds on average (spliced bytes are accounted too,
                        // a pipe's worth at a time) and the next exchange reads through the buffer.
                        let unpaced = self.rateLimiters.allSatisfy(\.isUnlimited) && !self.configuration.fileIO.guardsWrites
                        let kernelMayMoveBytes = self.digest == nil && partDigest == nil && unpaced
                        // A small body is gathered instead and written in one piece, past the page cache (a
                        // checksum and a Content-MD5 read each piece as it is written). Its record waits for
                        // its first write that does not complete it (``writeGathered``).
                        if unpaced, let length = plan.gather {
                            gathered = self.smallBodyGather(file, length: length, at: plan.offset, partDigest: partDigest)
                        }
                        if gathered == nil {
                            try self.recordValidatorsCheckpoint()
                        } else if self.infoDirty {
                            // The checkpoint interval counts from the head, as when the record is stored there.
                            self.lastCheckpointTime = monotonicSeconds()
                        }
                        self.perform(self.machine.bodyStarts())
                        writing = true
                        if let gathered {
                            // Received in place: the kernel copies the bytes into the gather buffer itself.
                            let body = gathered.body
                            return .receiveInPlace(
                                InPlaceBody(
                                    GatherReceiver(body) { count in
                                        try checkBodyLimit(count)
                                        let now = monotonicSeconds()
                                        let waiting = body.count
                                        body.received(count, now: now)
                                        // The bytes that were there before these, when they waited long enough.
                                        if self.gatheredBytesAreDue(body, now: now) {
                                            try self.writeGathered(gathered, prefix: waiting)
                                        }
                                    }))
                        }
                        if kernelMayMoveBytes {
                            return .spliceToFile(fileDescriptor: file.fd, offset: plan.offset)
                        }
                        return .stream
                    }
                },
                onBody: { bytes in
                    try checkBodyLimit(bytes.count)
                    if let gathered {
                        // Bytes that waited a progress interval go into the file (and the progress) first,
                        // so a slow or stalling link still shows them.
                        let now = monotonicSeconds()
                        let body = gathered.body
                        if self.gatheredBytesAreDue(body, now: now) { try self.writeGathered(gathered) }
                        if body.append(bytes, now: now) { return }
                        try self.writeGathered(gathered)
                        if body.append(bytes, now: now) { return }
                        // Still no room: these bytes go straight into the file, as on the stream path.
                    }
                    try self.write(bytes, to: file)
                    partDigest?.update(bytes)
                },
                onSpliced: { count in
                    try self.didWrite(count)
                })
        } catch {
            // What arrived before the failure goes into the file (and is credited) before it surfaces.
            if let gathered { try writeGathered(gathered) }
            throw error
        }
        if let gathered { try writeGathered(gathered) }
        if writing {
            publishProgress()
            if let partDigest {
                let computed = partDigest.finalize()
                if let refused = perform(ask { $0.bodyDigested(computed) }) { return refused }
            }
        }
        return machine.exchangeEnded(jitter: Self.jitter())
    }

    /// A small body being gathered (``SmallBodyGather``), the writer that puts it past the page cache, and
    /// the response's Content-MD5 digest when it has one (the download's checksum is ``digest``).
    private struct GatheredBody {
        let body: SmallBodyGather
        let writer: SegmentFileWriter
        let partDigest: DKDigest?
        /// The file offset just past the body's last byte.
        let end: Int64
    }

    /// A gather for the `length` bytes of the body about to start at `offset` (the machine found it small
    /// enough, ``DownloadStateMachine/BodyWrite/gather``), when a buffer is free and the file system takes
    /// direct writes; else nil (the body is spliced, or streamed when a digest reads it).
    private func smallBodyGather(_ file: FileHandleFD, length: Int64, at offset: Int64, partDigest: DKDigest?) -> GatheredBody? {
        guard let body = SmallBodyGather(remaining: length, at: offset) else { return nil }
        let writer = SegmentFileWriter(file, direct: true)
        return writer.writesDirect ? GatheredBody(body: body, writer: writer, partDigest: partDigest, end: offset + length) : nil
    }

    /// Whether the oldest gathered byte has waited a progress interval: those bytes then go into the file
    /// before the next ones are taken, so a slow or stalling link still shows them.
    private func gatheredBytesAreDue(_ body: SmallBodyGather, now: Double) -> Bool {
        body.count > 0 && now - body.oldestArrival >= configuration.progressInterval.asSeconds
    }

    /// Writes the gathered bytes at the file's end (whole blocks direct, the ends through the page cache)
    /// and credits them; on a failure credits what reached the file, like ``write(_:to:)``.
    ///
    /// The response's record (``recordValidatorsCheckpoint()``) goes on the partial first, unless this
    /// write completes the body: a whole small body then costs no record to encode, set and remove (and
    /// no attribute block allocated and freed, docs/BENCHMARKS.md, "Small files: past the page cache").
    /// A `kill -9` between this write and the final rename leaves a partial without a record, which the
    /// next run fetches again: the same at most 256 KiB a `kill -9` during the gathering costs.
    ///
    /// `prefix` writes only the first pending bytes (the ones that arrived before the last read); the rest
    /// stay pending, counted from now. The digests read what reached the file, as with ``write(_:to:)``.
    @inline(never)  // under the body callbacks; not inlined into the streamed body's path, which never takes it
    private func writeGathered(_ gathered: GatheredBody, prefix: Int? = nil) throws {
        let body = gathered.body
        let pending = body.pending
        let bytes = UnsafeRawBufferPointer(rebasing: pending[..<min(prefix ?? pending.count, pending.count)])
        guard !bytes.isEmpty else { return }
        if body.start + Int64(bytes.count) != gathered.end { try recordValidatorsCheckpoint() }
        var written = 0
        defer {
            let inFile = UnsafeRawBufferPointer(rebasing: bytes[..<written])
            digest?.update(inFile)
            gathered.partDigest?.update(inFile)
            body.consumed(written, now: monotonicSeconds())
        }
        do {
            try gathered.writer.write(bytes, at: body.start, written: &written)
        } catch {
            machine.bodyWritten(written)
            throw error
        }
        try didWrite(written)
    }

    private func receiveBufferSize(_ client: DKHTTPClient) -> Int {
        guard let rate = rateLimiters.filter({ !$0.isUnlimited }).map(\.bytesPerSecond).min() else {
            return client.configuration.receiveBufferSize
        }
        // Smaller reads keep a limited transfer smooth instead of bursting a whole buffer then sleeping.
        return min(client.configuration.receiveBufferSize, max(64 << 10, rate / 8))
    }

    /// The effects of a restart the machine decided: the partial data, its journal, a background sync
    /// in flight and the checksum so far are all of the old version.
    private func discardPartialData() throws {
        guard let file else { return }
        SegmentJournal.remove(forTempFile: tempPath)  // its records describe the old version
        discardBackgroundSync()
        try file.truncate(to: 0)
        durableOffset = -1
        if let checksum = request.checksum { digest = DKDigest(checksum.algorithm) }
        infoDirty = true
    }


    /// Checks free space (statvfs `f_bavail`) for the reservation's bytes and reserves them when it says so.
    private func reserve(_ reservation: SpaceReservation) throws {
        guard let file else { return }
        let remaining = reservation.length
        if let available = FileSystem.availableBytes(at: workingDirectory), available < remaining {
            throw DownloadError(
                .insufficientSpace,
                "not enough space in \(workingDirectory): \(remaining) bytes needed, \(available) available")
        }
        if reservation.preallocates {
            do {
                try file.reserve(offset: reservation.offset, length: remaining)
            } catch {
                throw DownloadError(
                    .insufficientSpace, "not enough space in \(workingDirectory) for \(remaining) bytes: \(error)")
            }
        }
    }

    // MARK: - Segments

    /// Runs segment workers over `[0, total)` (``SegmentCoordinator``) until every segment is written or
    /// they stop, and hands their outcome to the machine.
    private func runSegments(_ run: EngineMachine.SegmentRun, client: DKHTTPClient) throws -> Decided {
        guard let file else { throw DownloadError(.fileSystem, "the temp file is not open") }
        if let reservation = run.reserve { try reserve(reservation) }
        let total = run.total
        let coordinator = SegmentCoordinator(
            total: total, file: file, tempPath: tempPath, client: client, configuration: configuration, control: control,
            url: run.url, headers: run.headers, ifRange: run.ifRange, entityTag: run.entityTag, rateLimiters: rateLimiters,
            bufferSize: receiveBufferSize(client), sources: sources(of: run), lastModified: run.lastModified,
            pieces: request.pieceChecksums)
        let fetchedBefore = bytesThisRun
        let hooks = SegmentCoordinator.Hooks(
            started: { board in
                self.activeBoard = board
                self.machine.segmentsStarted(board.snapshot())
                self.infoDirty = true
            },
            checkpoint: { force in try self.checkpoint(force: force) },
            publish: { received, fetched, connections, now in
                self.publishProgress(received: received, thisRun: fetchedBefore + fetched, connections: connections, now: now)
            })
        defer { activeBoard = nil }
        let report: SegmentCoordinator.Report
        do {
            report = try coordinator.run(saved: run.saved, prefix: run.prefix, hooks: hooks)
        } catch let failure as SegmentCoordinator.Failure {
            bytesThisRun += failure.report.fetched
            throw failure.error
        }
        bytesThisRun += report.fetched
        sourceUsage = report.sources
        machine.segmentsRecovered(report.recovered)
        if report.outcome == .complete, let checksum = request.checksum {
            // Segments finish out of order: hash the whole file once, at the end.
            let digest = DKDigest(checksum.algorithm)
            try hashPrefix(into: digest, count: total, from: file)
            self.digest = digest
        }
        return machine.segmentsEnded(
            report.outcome, map: activeBoard?.snapshot() ?? ask({ $0.resource }).savedSegments, jitter: Self.jitter())
    }


    /// The sources of a segmented run as the machine decided them (``DownloadStateMachine/SegmentRun/sources``:
    /// credentials only to the first URL's origin, the Link header's mirrors last); empty without mirrors.
    private func sources(of run: EngineMachine.SegmentRun) -> [DownloadSource] {
        if run.linkedMirrors > 0 {
            let linked = run.sources.suffix(run.linkedMirrors).map(\.url.listingDescription)
            configuration.logger?.info("\(linked.count) mirror(s) from the Link header: \(linked.joined(separator: ", "))")
        }
        return run.sources.map { DownloadSource(url: $0.url, headers: $0.headers) }
    }

    // MARK: - Body, progress, checkpoints

    private func write(_ bytes: UnsafeRawBufferPointer, to file: FileHandleFD) throws {
        var written = 0
        do {
            try file.write(bytes, toAbsoluteOffset: ask({ $0.resource.offset }), written: &written)
        } catch {
            // Keep whatever reached the file, make it durable, then stop resumably.
            machine.bodyWritten(written)
            if written > 0 { digest?.update(UnsafeRawBufferPointer(rebasing: bytes[0..<written])) }
            throw error
        }
        digest?.update(bytes)
        try didWrite(bytes.count)
    }

    /// Accounts for `count` bytes now in the temp file at `offset` (written here or spliced there by
    /// the kernel): progress, checkpoints, the low-speed limit and rate limits.
    private func didWrite(_ count: Int) throws {
        machine.bodyWritten(count)
        bytesThisRun += Int64(count)
        unflushedBytes += count
        if unflushedBytes >= Self.writebackInterval, let file {
            // Keep the disk busy while the network is: the sync before the final rename then only
            // waits for the last few MiB instead of the whole file.
            file.startWriteback()
            unflushedBytes = 0
        }
        let now = monotonicSeconds()
        if now - lastProgressTime >= configuration.progressInterval.asSeconds { publishProgress(now: now) }
        if now - lastCheckpointTime >= configuration.checkpointInterval.asSeconds { try checkpoint(force: false) }
        try received(count, now: now)
        if !TokenBucket.wait(rateLimiters, afterConsuming: count, wakes: control.wakeUps, shouldStop: { control.stopRequest != .none }) {
            try endedByStopRequest()
        }
    }

    /// The machine's verdict on `count` more bytes (the low-speed rule, a body past its range). Not inlined
    /// into ``didWrite(_:)``: the verdict, which can hold a whole error, would sit in that frame, an
    /// ancestor of every progress event's delivery — the deepest point of a transfer thread's stack.
    @inline(never)
    private func received(_ count: Int, now: Double) throws(ExchangeRefused) {
        try performInExchange(machine.received(count, now: now))
    }

    /// A stop request ended a wait (a retry's delay, a rate limit's). Not inlined, for the same reason as
    /// ``received(_:now:)``.
    @inline(never)
    private func endedByStopRequest() throws -> Never {
        throw DownloadError(.cancelled, "stopped")
    }

    private func publishProgress(now: Double = monotonicSeconds()) {
        publishProgress(received: ask({ $0.resource.offset }), thisRun: bytesThisRun, connections: 1, now: now)
    }

    /// Publishes a snapshot: `received` bytes of the file present, `thisRun` of them fetched by this run.
    /// Not inlined, so that its event's temporaries are not in the frame of `didWrite`, under every body
    /// chunk's write (the deepest point of a transfer thread's stack); not measured alone — the depth fell
    /// with the removal of the machine's copies (docs/BENCHMARKS.md, "Stacks at 1,024 transfers").
    @inline(never)
    private func publishProgress(received: Int64, thisRun: Int64, connections: Int, now: Double) {
        speed.record(totalBytes: thisRun, at: now)
        lastProgressTime = now
        let rate = speed.bytesPerSecond
        var remaining: Double?
        let totalLength = ask({ $0.resource.totalLength })
        if let total = totalLength, rate > 0 { remaining = Double(max(0, total - received)) / rate }
        control.publish(
            DownloadProgress(
                bytesReceived: received, totalBytes: totalLength, bytesThisRun: thisRun, bytesPerSecond: rate,
                timeRemaining: remaining.map { .seconds($0) }, activeConnections: connections))
    }

    /// Records what a response head taught (validators, length, name) before any of its body bytes
    /// are written. It claims no new bytes, so it skips every `fsync`: a process crash keeps it (the page
    /// cache survives), a power loss only loses the validators and falls back to the temp file's length.
    /// Small files thus pay two syncs in all (data, then the directory after the rename), not six. The
    /// record goes on the partial itself (an extended attribute) until a checkpoint writes the
    /// `.dkresume` file: a file that finishes within one checkpoint interval never creates, renames and
    /// unlinks one (issue #18: that cost more than the transfer of a 64 KiB file).
    private func recordValidatorsCheckpoint() throws {
        checkpointQueue.settleBlocking()
        applyBackgroundSync()
        if let failure = backgroundCheckpoint.takeFailure() { throw failure }
        guard infoDirty, let file else { return }
        let info = currentResumeInfo()
        // The partial's own record is kept current even when a `.dkresume` file exists (and is rewritten
        // too), so that the record a corrupt or deleted file falls back to is never an older one.
        let stored = info.store(onPartial: file.fd, hooks: file.hooks)
        if recordFileMayExist || !stored {
            try info.write(to: infoPath, durable: false, hooks: file.hooks)
            recordFileMayExist = true
        }
        infoDirty = false
        lastCheckpointTime = monotonicSeconds()
    }

    /// Makes the written bytes durable, then records them in the resume info (atomically).
    /// Skipped when nothing changed since the last checkpoint.
    @inline(never)  // once a checkpoint interval, under a body chunk's write: its record stays out of that frame
    private func checkpoint(force: Bool) throws {
        guard let file else { return }
        lastCheckpointTime = monotonicSeconds()
        if let board = activeBoard {
            // Snapshot first, sync second: the map never claims bytes the sync did not cover.
            let snapshot = board.snapshot()
            try file.syncData()
            machine.segmentsCheckpointed(snapshot)
            durableOffset = ask({ $0.resource }).offset
            infoDirty = false
            recordFileMayExist = true
            try currentResumeInfo().write(to: infoPath, hooks: file.hooks)
            return
        }
        applyBackgroundSync()
        if let failure = backgroundCheckpoint.takeFailure() { throw failure }
        let offset = ask({ $0.resource }).offset
        guard offset != durableOffset || infoDirty else { return }
        if !force {
            guard backgroundCheckpoint.begin() else { return }  // one in flight is enough
            // The snapshot claims only bytes already written; the fdatasync below covers them all.
            // `durableOffset` moves only once the sync succeeded (``BackgroundCheckpointState``): a
            // failed sync leaves the old durable offset, and the failure surfaces at the next checkpoint.
            var snapshot = currentResumeInfo()
            snapshot.bytesReceived = offset
            let info = snapshot
            let claimed = offset
            infoDirty = false
            recordFileMayExist = true
            let shared = SharedFile(handle: file)
            let path = infoPath
            let state = backgroundCheckpoint
            checkpointQueue.async {
                do {
                    try shared.handle.syncData()
                    state.synced(claimed)
                    try info.write(to: path, hooks: shared.handle.hooks)
                    state.end(failure: nil)
                } catch {
                    state.end(failure: error)
                }
            }
            return
        }
        checkpointQueue.settleBlocking()
        applyBackgroundSync()
        if let failure = backgroundCheckpoint.takeFailure() { throw failure }
        try file.syncData()
        durableOffset = offset
        infoDirty = false
        recordFileMayExist = true
        try currentResumeInfo().write(to: infoPath, hooks: file.hooks)
    }

    /// Takes the offset the last finished background `fdatasync` made durable; after a failed
    /// sync nothing moves and the resume info must be rewritten (`infoDirty`).
    private func applyBackgroundSync() {
        let (synced, failed) = backgroundCheckpoint.takeSynced()
        if let synced, synced > durableOffset { durableOffset = synced }
        if failed { infoDirty = true }
    }

    /// Waits for a background checkpoint and forgets what it synced (the partial is about to restart).
    private func discardBackgroundSync() {
        checkpointQueue.settleBlocking()
        _ = backgroundCheckpoint.takeSynced()
    }

    func currentResumeInfo() -> ResumeInfo {
        let resource = ask({ $0.resource })
        let savedSegments = resource.savedSegments
        let originalURL = ask({ $0.originalURL }), currentURL = ask({ $0.currentURL })
        var info = ResumeInfo(
            originalURL: originalURL.withoutUserinfo.absoluteString, currentURL: currentURL.withoutUserinfo.absoluteString,
            tempFilePath: absolutePath(tempPath),
            bytesReceived: savedSegments.isEmpty ? max(0, durableOffset) : SegmentPlan.contiguousPrefix(savedSegments))
        info.segments = savedSegments
        info.entityTag = resource.entityTagText
        info.lastModified = resource.lastModified
        info.destinationPath = destinationPath.map(absolutePath)
        info.fileName = resource.fileName
        info.totalLength = resource.totalLength
        info.acceptsRanges = resource.acceptsRanges
        info.created = created
        info.updated = Date()
        info.bootID = FileSystem.bootID
        if let checksum = request.checksum {
            info.checksum = ResumeChecksum(algorithm: checksum.algorithm.rawValue, expectedHex: checksum.expectedHex)
        }
        return info
    }

    // MARK: - Finishing

    /// What ``finalize()`` ends with: the file in place, or the machine's answer to its refusal of the bytes.
    private enum Finished {
        case placed(DownloadResult)
        case refused(Decided)
    }

    private func finalize() throws -> Finished {
        guard let file else { throw DownloadError(.fileSystem, "the temp file is not open") }
        checkpointQueue.settleBlocking()
        control.setState(.verify)
        let resource = ask({ $0.resource })
        let offset = resource.offset
        let pieces: PieceChecksums?, checksum: EngineMachine.FinalChecksum?
        switch ask({ $0.verifying() }) {
        case .fail(let failure): return .refused(failed(failure))
        case .check(let wanted, let final): (pieces, checksum) = (wanted, final)
        }
        try file.syncData()
        durableOffset = offset
        if let pieces {
            let digests = try pieceDigests(pieces, total: offset, in: file)
            if let refused = perform(ask { $0.piecesDigested(digests) }) { return .refused(refused) }
        }
        var checksumHex: String?
        switch checksum {
        case .stated(let stated)?:
            // The server's own digest of the whole file (RFC 6249 §4): hashed from the file, which holds it all.
            let digest = DKDigest(stated.algorithm)
            try hashPrefix(into: digest, count: offset, from: file)
            checksumHex = DKDigest.hex(digest.finalize())
        case .requested?:
            checksumHex = digest.map { DKDigest.hex($0.finalize()) }
            self.digest = nil
        case nil:
            break
        }
        if let checksumHex, let refused = perform(ask { $0.fileDigested(checksumHex) }) { return .refused(refused) }
        // The partial was private (0600) while incomplete; the finished file gets the usual 0644.
        _ = fchmod(file.fd, 0o644)
        // Validators and the URL go on the inode before the rename, so the finished file carries them
        // from its first instant: a manager that dies between this rename and its task row's update
        // recognises the file as this task's on restart instead of downloading it again. They are set
        // before the partial's record is removed: the record (about 1 KB) does not fit inside an ext4
        // inode, and removing it first freed its external xattr block only for the validators to
        // allocate another (a block freed and allocated per small file).
        FinishedFileValidators.record(
            entityTag: resource.entityTagText, lastModified: resource.lastModified,
            url: ask({ $0.originalURL }).withoutUserinfo.absoluteString,
            fd: file.fd)
        ResumeInfo.removeStored(fromPartial: file.fd)
        let destination = try placeFinalFile()
        // Whether this unlink survives a power loss does not matter: a resume-info file without its
        // temp file only makes a rerun download again.
        if recordFileMayExist { try FileSystem.removeIfOwned(infoPath, hooks: configuration.fileIO) }
        SegmentJournal.remove(forTempFile: tempPath)
        // The lock on the partial is released only now, after the rename and the cleanup.
        self.file = nil
        publishProgress()
        control.setState(.complete)
        return .placed(DownloadResult(
            path: destination, bytes: offset, resumedFrom: resource.resumedFrom, bytesTransferred: bytesThisRun,
            finalURL: ask({ $0.currentURL }).absoluteString, checksumHex: checksumHex,
            isResumable: control.isResumable ?? (resource.acceptsRanges == true), entityTag: resource.entityTagText,
            lastModified: resource.lastModified, responseStatus: ask({ $0.acceptedHead })?.status,
            responseHeaders: ask({ $0.acceptedHead })?.headers, sources: sourceUsage))
    }

    /// The digest of each piece of `table` in the file's first `total` bytes, in order (a download with
    /// piece checksums that ran on one connection: the machine judges them, ``DownloadStateMachine/piecesDigested(_:)``).
    private func pieceDigests(_ table: PieceChecksums, total: Int64, in file: FileHandleFD) throws -> [[UInt8]] {
        try (0..<table.pieceCount(forLength: total)).map { piece in
            let digest = DKDigest(table.algorithm)
            try file.hash(table.range(ofPiece: piece, total: total), into: digest)
            return digest.finalize()
        }
    }

    /// Renames the partial into place. `-o FILE` replaces the file the caller named; a directory
    /// destination never replaces an existing file: it takes the first free name of
    /// ``FileNaming/freeNameCandidates(for:)`` (docs/ENGINE.md, "Final names").
    private func placeFinalFile() throws -> String {
        let destination = try finalDestination()
        guard case .directory(let directory, _) = request.destination else {
            try FileSystem.moveDurably(from: tempPath, to: destination, hooks: configuration.fileIO)
            return destination
        }
        for name in FileNaming.freeNameCandidates(for: FileSystem.lastComponent(of: destination)) {
            let path = FileSystem.join(directory, name)
            guard FileNaming.isContained(path, in: directory) else { continue }
            if try FileSystem.moveDurablyWithoutReplacing(from: tempPath, to: path, hooks: configuration.fileIO) { return path }
        }
        throw DownloadError(
            .fileSystem, "\(destination) and its 99 numbered alternatives exist; refusing to overwrite any of them")
    }

    private func finalDestination() throws -> String {
        switch request.destination {
        case .file(let path):
            return path
        case .directory(let directory, _):
            let originalURL = ask({ $0.originalURL })
            let name = ask({ $0.resource }).fileName
                ?? FileNaming.fileName(
                    forURL: originalURL.absoluteString, pathExtension: originalURL.pathExtension, fileID: nil,
                    md5Hex: EngineMachine.md5Hex)
            let path = FileSystem.join(directory, name)
            guard FileNaming.isContained(path, in: directory) else {
                throw DownloadError(.fileSystem, "refusing to write \(name) outside \(directory)")
            }
            return path
        }
    }

    // MARK: - Helpers

    /// The random part of a backoff the machine may decide, drawn here at the edge (the machine takes it
    /// as an input and stays a function of its events).
    private static func jitter() -> Double { .random(in: 0...1) }

    /// Resume info stores absolute paths; relative ones are taken from the current directory.
    private func absolutePath(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        let cwd = FileManager.default.currentDirectoryPath
        return FileSystem.join(cwd, path.hasPrefix("./") ? String(path.dropFirst(2)) : path)
    }
}

/// Coordinates the background checkpoint with the engine thread: at most one in flight, and its
/// failure (e.g. ENOSPC writing the plist) surfaces at the engine's next checkpoint.
final class BackgroundCheckpointState: Sendable {
    private struct State {
        var inFlight = false
        var failure: (any Error)?
        /// The offset the last successful background `fdatasync` covered, not yet taken by the engine.
        var synced: Int64?
        /// A background checkpoint failed since the engine last looked.
        var failedSinceTaken = false
    }

    private let state = LockedValue(State())

    /// Claims the slot; false if a checkpoint is already running.
    func begin() -> Bool {
        state.withLock { state in
            if state.inFlight { return false }
            state.inFlight = true
            return true
        }
    }

    func end(failure: (any Error)?) {
        state.withLock { state in
            state.inFlight = false
            if let failure {
                state.failedSinceTaken = true
                if state.failure == nil { state.failure = failure }
            }
        }
    }

    /// Records that the data up to `offset` reached stable storage (called after `fdatasync` returns).
    func synced(_ offset: Int64) {
        state.withLock { state in state.synced = max(state.synced ?? offset, offset) }
    }

    /// The durable offset the background made good, and whether a background checkpoint failed.
    func takeSynced() -> (offset: Int64?, failed: Bool) {
        state.withLock { state in
            defer {
                state.synced = nil
                state.failedSinceTaken = false
            }
            return (state.synced, state.failedSinceTaken)
        }
    }

    func takeFailure() -> (any Error)? {
        state.withLock { state in
            defer { state.failure = nil }
            return state.failure
        }
    }
}

/// Receives a gathered body in place (``BodyDisposition/receiveInPlace(_:)``): the next bytes go into the
/// gather buffer's free space, and `onReceived` takes them (the range check, the gather, a due write).
private final class GatherReceiver: BodyReceiver {
    private let body: SmallBodyGather
    private let onReceived: (Int) throws -> Void

    init(_ body: SmallBodyGather, onReceived: @escaping (Int) throws -> Void) {
        self.body = body
        self.onReceived = onReceived
    }

    func window(limit: Int) -> UnsafeMutableRawBufferPointer { body.freeSpace(limit: limit) }

    func received(_ count: Int) throws { try onReceived(count) }
}
