import Dispatch
import Foundation
import Glibc
import HTTPClient
import HTTPWire

/// One download of one URL to one destination over a single connection at a time, run synchronously
/// on a dedicated thread (see docs/ENGINE.md).
///
/// The durable bytes in the temp file are the truth; the resume info is a checkpoint of them that
/// never claims more than has been `fdatasync`ed. Not `Sendable`: it lives on its thread.
final class TransferEngine {
    let request: DownloadRequest
    let configuration: DownloadConfiguration
    let control: DownloadControl
    private let suppliedClient: DKHTTPClient?

    // Identity and location.
    private var originalURL: HTTPURL
    private var currentURL: HTTPURL
    private var requestHeaders: DKHTTPHeaders
    private var workingDirectory = ""
    private var tempPath = ""
    private var infoPath = ""
    private var fileName: String?
    private var destinationPath: String?

    // What is known about the resource and the partial data.
    private var file: FileHandleFD?
    private var offset: Int64 = 0
    private var durableOffset: Int64 = -1
    private var resumedFrom: Int64 = 0
    private var totalLength: Int64?
    private var entityTag: EntityTag?
    private var entityTagText: String?
    private var lastModified: String?
    private var acceptsRanges: Bool?
    private var created = Date()
    private var digest: DKDigest?
    private var infoDirty = true

    // Per-run accounting.
    private var bytesThisRun: Int64 = 0
    private var speed = SpeedMeter()
    private var lastProgressTime = 0.0
    private var lastCheckpointTime = 0.0
    private var lowSpeedWindowStart = 0.0
    private var lowSpeedWindowBytes: Int64 = 0
    private let rateLimiters: [TokenBucket]
    private var restartPending: RestartReason?

    // Segmented transfers (docs/ENGINE.md, "Segments").
    /// The segment map from the resume info or the last segmented checkpoint; empty in single mode.
    private var savedSegments: [ResumeSegment] = []
    /// The live map while segment workers run.
    private var activeBoard: SegmentBoard?
    /// Set once the download settled on one connection (probe said no, or too small to split).
    private var singleConnectionOnly = false
    /// Bounds restarts of segmented transfers (issue #13, 1).
    private var segmentRestarts = SegmentRestartPolicy()

    // Background checkpoints: `fdatasync` of a fast stream can take a while, so periodic checkpoints
    // run on their own queue and never stall the receive loop. Forced ones (head, pause, stop) wait
    // for it and run inline.
    private let checkpointQueue = DispatchQueue(label: "DownloadKit checkpoint")
    private let backgroundCheckpoint = BackgroundCheckpointState()

    init(request: DownloadRequest, configuration: DownloadConfiguration, control: DownloadControl, client: DKHTTPClient?)
        throws(DownloadError)
    {
        self.request = request
        self.configuration = configuration
        self.control = control
        self.suppliedClient = client
        do {
            originalURL = try HTTPURL(request.url)
        } catch {
            throw DownloadError(.invalidURL, "invalid URL \(request.url): \(error.detail)")
        }
        currentURL = originalURL
        requestHeaders = request.headers
        rateLimiters = (configuration.rateLimit.map { [TokenBucket(bytesPerSecond: $0)] } ?? []) + configuration.sharedRateLimiters
    }

    // MARK: - Running

    /// Runs to the end: returns the result or throws the final error (paused and cancelled included).
    func run() throws(DownloadError) -> DownloadResult {
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
    private func stop(with failure: DownloadError) throws(DownloadError) -> Never {
        // A background checkpoint must not write the plist after the files are removed or moved.
        checkpointQueue.sync {}
        // Files are removed only by the writer holding the partial's lock (`file` is open): a writer
        // refused with `.destinationInUse` (or failing before the open) must not touch another's files.
        let holdsLock = file != nil
        switch control.stopRequest {
        case .cancel:
            // Unlink while the lock is held, so no second writer can lock the doomed file.
            if holdsLock {
                try? FileSystem.remove(tempPath)
                try? FileSystem.remove(infoPath)
                SegmentJournal.remove(forTempFile: tempPath)
            }
            file = nil
            control.setState(.cancel)
            throw DownloadError(.cancelled, "the download was cancelled; its partial data was removed")
        case .pause:
            try? checkpoint(force: true)
            control.setResumeData(try? currentResumeInfo().encoded())
            control.setState(.pause)
            throw DownloadError(
                .paused, "the download was paused at \(offset) bytes; resume data is available")
        case .none:
            if !holdsLock {
                // Nothing of ours is on disk to keep or remove.
            } else if failure.code == .checksumMismatch || failure.code == .contentMD5Mismatch {
                // The bytes are complete but wrong: nothing here is worth resuming.
                // Unlink while the lock is held, so no second writer can lock the doomed file.
                try? FileSystem.remove(tempPath)
                try? FileSystem.remove(infoPath)
                SegmentJournal.remove(forTempFile: tempPath)
                file = nil
            } else if offset == 0 && !savedSegments.contains(where: { $0.written > 0 }) {
                // Nothing was received anywhere (404, TLS failure, redirect loop…): leave no clutter behind.
                // Unlink while the lock is held, so no second writer can lock the doomed file.
                try? FileSystem.remove(tempPath)
                try? FileSystem.remove(infoPath)
                SegmentJournal.remove(forTempFile: tempPath)
                file = nil
            } else if !tempPath.isEmpty && file != nil {
                try? checkpoint(force: true)
                control.setResumeData(try? currentResumeInfo().encoded())
            }
            control.setState(.fail(failure))
            throw failure
        }
    }

    // MARK: - Preparing the partial data

    private func prepare() throws {
        var resumeInfo: ResumeInfo?
        if let data = request.resumeData {
            do {
                resumeInfo = try ResumeInfo.decode(data)
            } catch {
                throw DownloadError(.invalidResumeData, "the resume data cannot be used: \(error)")
            }
        }

        switch request.destination {
        case .file(let path):
            // `fileName` stays nil: it records names decided from a response, and the caller chose this one.
            destinationPath = path
            try FileSystem.createDirectories(FileSystem.directory(of: path))
        case .directory(let directory, _):
            try FileSystem.createDirectories(directory)
        }
        let working = WorkingFiles(
            destination: request.destination, workingDirectory: request.workingDirectory, url: originalURL)
        workingDirectory = working.directory
        tempPath = working.partial
        infoPath = working.resumeInfo
        try FileSystem.createDirectories(workingDirectory)
        ResumeInfo.removeStaleTemporaryFiles(for: infoPath)

        if resumeInfo == nil, FileSystem.exists(infoPath) {
            // A corrupt or foreign plist is not fatal: the temp file's length is the fallback truth.
            resumeInfo = try? ResumeInfo.read(from: infoPath)
        }
        if let info = resumeInfo {
            adopt(info)
        }
        if let replacement = request.replacementURL {
            do {
                currentURL = try HTTPURL(replacement)
            } catch {
                throw DownloadError(.invalidURL, "invalid replacement URL \(replacement): \(error.detail)")
            }
        }

        let handle = try PartialFileLock.openLocked(tempPath, destination: destinationPath ?? FileSystem.directory(of: tempPath))
        file = handle
        let size = try handle.size()
        if let info = resumeInfo, !info.segments.isEmpty {
            // A segmented download: only the checkpointed segment map is trusted (segments end
            // anywhere in the file, so its length proves nothing). A map claiming bytes beyond the
            // file's end (truncated or replaced temp file) is cut back to what the file holds.
            savedSegments = info.segments.map { segment in
                var segment = segment
                segment.written = max(0, min(segment.written, size - segment.start))
                return segment
            }
            offset = Self.contiguousPrefix(savedSegments)
            resumedFrom = savedSegments.reduce(0) { $0 + $1.written }
            durableOffset = -1
            return
        } else if let info = resumeInfo {
            // Same boot: the page cache survived a process crash, so every byte in the file is real.
            // After a reboot only what the last checkpoint fsynced is trusted.
            let sameBoot = info.bootID != nil && info.bootID == FileSystem.bootID
            offset = sameBoot ? size : min(size, info.bytesReceived)
        } else {
            offset = size
            if size > 0 { infoDirty = true }
        }
        if let total = totalLength, offset > total {
            offset = 0
            restartPending = .partialLongerThanResource
        } else if offset > 0, ifRangeValue == nil {
            // Nothing proves these bytes are the resource's current ones (no record, a corrupt or foreign
            // one, or a server that named no strong ETag and no Last-Modified): a bare `Range` could splice
            // two versions into one file. Start over (issue #13, defect 3; docs/ENGINE.md, "Resume rules").
            restartPending = .unusablePartialData
        }
        if offset != size { try handle.truncate(to: offset) }
        resumedFrom = offset
        durableOffset = resumeInfo == nil ? -1 : min(offset, resumeInfo?.bytesReceived ?? 0)

        if let checksum = request.checksum {
            let digest = DKDigest(checksum.algorithm)
            try hashPrefix(into: digest, count: offset, from: handle)
            self.digest = digest
        }
    }

    private func adopt(_ info: ResumeInfo) {
        // The identity stays the recorded original URL (a different URL for the same file is a
        // refreshed one, seed 002). Requests start from the URL given now and follow redirects again:
        // a recorded redirect target (often a signed CDN URL) may have expired since.
        // Records hold URLs without userinfo (passwords never rest on disk): the URL given now keeps
        // its credentials when it names the recorded resource.
        if case .file = request.destination, let original = try? HTTPURL(info.originalURL),
            original.absoluteString != originalURL.withoutUserinfo.absoluteString
        {
            originalURL = original
        }
        entityTagText = info.entityTag
        entityTag = info.entityTag.flatMap { try? EntityTag(parsing: $0) }
        lastModified = info.lastModified
        totalLength = info.totalLength
        acceptsRanges = info.acceptsRanges
        created = info.created
        if case .directory = request.destination, let name = info.fileName {
            fileName = name
        }
        // Apple resume data names its own temp file; adopt it when it is there and ours is not.
        // Only a file of ours in the working directory qualifies (docs/RESUME-INFO.md, "Paths"): a
        // planted record must never move another file into place.
        if !FileSystem.exists(tempPath), info.tempFilePath != tempPath,
            RecordPath.isAdoptable(info.tempFilePath, in: workingDirectory)
        {
            _ = rename(info.tempFilePath, tempPath)
        }
    }

    private func hashPrefix(into digest: DKDigest, count: Int64, from handle: FileHandleFD) throws {
        guard count > 0 else { return }
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
        defer { chunk.deallocate() }
        var position: Int64 = 0
        while position < count {
            let want = Int(min(Int64(chunk.count), count - position))
            let n = try handle.read(
                into: UnsafeMutableRawBufferPointer(rebasing: chunk[0..<want]), fromAbsoluteOffset: position)
            if n == 0 { throw FileSystemError("pread", path: handle.path, errno: EIO) }
            digest.update(UnsafeRawBufferPointer(rebasing: chunk[0..<n]))
            position += Int64(n)
        }
    }

    // MARK: - The request loop

    /// What one exchange decided.
    private enum AttemptOutcome {
        /// The probe found range support and a length: run segment workers.
        case segmented(total: Int64)
        /// The probe settled on one connection: send the normal request next.
        case probeDeclined
        case bodyReceived
        case complete
        case redirect(HTTPURL)
        case refreshURL(status: Int)
        case restart(RestartReason)
    }

    private func transfer(using client: DKHTTPClient) throws -> DownloadResult {
        var retry = RetryPolicy(configuration)
        var redirects = 0
        var visited: Set<String> = [currentURL.absoluteString]
        var refreshes = 0
        let buffer = ReceiveBuffer(capacity: receiveBufferSize(client))

        /// Asks the URL provider for a fresh URL after 401/403/404/410 (single connection and segments).
        func refreshURL(after status: Int) throws {
            guard let provider = configuration.urlProvider, refreshes < configuration.maxURLRefreshes else {
                throw DownloadError.status(status, reason: "", url: currentURL)
            }
            refreshes += 1
            let context = URLRefreshContext(
                originalURL: originalURL.absoluteString, currentURL: currentURL.absoluteString,
                status: status, bytesReceived: offset)
            guard let fresh = Self.callProvider(provider, context) else {
                throw DownloadError.status(status, reason: "", url: currentURL)
            }
            do {
                currentURL = try HTTPURL(fresh)
            } catch {
                throw DownloadError(.invalidURL, "the URL provider returned an invalid URL \(fresh)")
            }
            redirects = 0
            visited = [currentURL.absoluteString]
            infoDirty = true
            control.setState(.refreshURL(to: currentURL.description))
        }
        if offset > 0 {
            control.setState(.resume(offset: offset))
        } else {
            control.setState(.start)
        }
        while true {
            if control.stopRequest != .none {
                throw DownloadError(.cancelled, "stopped")
            }
            let offsetBefore = offset
            do {
                let outcome = try attempt(client: client, buffer: buffer)
                switch outcome {
                case .segmented(let total):
                    switch try runSegments(total: total, client: client) {
                    case .complete: return try finalize()
                    case .restart(let reason): try restartFromZero(reason)
                    case .refreshURL(let status): try refreshURL(after: status)
                    }
                case .probeDeclined:
                    continue
                case .complete:
                    return try finalize()
                case .bodyReceived:
                    if let total = totalLength, offset < total {
                        // A server may send less than the open-ended range asked for: ask for the rest —
                        // but an answer without a single byte is a failure (retried with backoff, bounded
                        // by `retries`), not a reason to ask again at once.
                        if offset == offsetBefore {
                            throw DownloadError(
                                .contentRangeMismatch, "the server answered with no body bytes at offset \(offset) of \(total)",
                                isTransient: true)
                        }
                        continue
                    }
                    return try finalize()
                case .redirect(let target):
                    redirects += 1
                    if redirects > configuration.maxRedirects {
                        throw DownloadError(
                            .tooManyRedirects,
                            "too many redirects: more than \(configuration.maxRedirects) starting at \(originalURL)")
                    }
                    if !visited.insert(target.absoluteString).inserted {
                        throw DownloadError(.redirectLoop, "redirect loop: \(target) was already visited")
                    }
                    follow(redirectTo: target)
                case .refreshURL(let status):
                    try refreshURL(after: status)
                case .restart(let reason):
                    try restartFromZero(reason)
                }
            } catch {
                let failure = DownloadError.wrap(error)
                if control.stopRequest != .none || failure.code == .cancelled { throw failure }
                let decision = retry.next(after: failure, progress: offset - offsetBefore, retryAfter: pendingRetryAfter)
                pendingRetryAfter = nil
                guard case .retry(let delay, let attempt) = decision else { throw failure }
                try? checkpoint(force: true)
                control.setState(.retry(after: .seconds(delay), attempt: attempt, error: failure.detail))
                if !interruptibleSleep(delay, shouldStop: { control.stopRequest != .none }) {
                    throw DownloadError(.cancelled, "stopped")
                }
                control.setState(.resume(offset: offset))
            }
        }
    }

    private var pendingRetryAfter: Double?
    /// The last byte the current 206 response may carry (its Content-Range end); nil for a 200.
    private var rangeEnd: Int64?
    /// Bytes written since writeback was last started (see `didWrite`).
    private var unflushedBytes = 0
    /// Start writeback after this many bytes (8 MiB).
    static let writebackInterval = 8 << 20

    private func receiveBufferSize(_ client: DKHTTPClient) -> Int {
        guard let rate = rateLimiters.map(\.bytesPerSecond).min() else { return client.configuration.receiveBufferSize }
        // Smaller reads keep a limited transfer smooth instead of bursting a whole buffer then sleeping.
        return min(client.configuration.receiveBufferSize, max(64 << 10, rate / 8))
    }

    private func follow(redirectTo target: HTTPURL) {
        // Credentials never cross to another origin (scheme, host, port), and never come from a redirect.
        if target.origin != currentURL.origin {
            for name in ["Authorization", "Cookie", "Proxy-Authorization"] + request.credentialHeaderNames { requestHeaders.remove(name: name) }
        }
        currentURL = target
        infoDirty = true
        control.setState(.redirect(to: target.description))
    }

    private func restartFromZero(_ reason: RestartReason) throws {
        guard let file else { return }
        SegmentJournal.remove(forTempFile: tempPath)  // its records describe the old version
        discardBackgroundSync()
        try file.truncate(to: 0)
        offset = 0
        durableOffset = -1
        resumedFrom = 0
        if let checksum = request.checksum { digest = DKDigest(checksum.algorithm) }
        entityTag = nil
        entityTagText = nil
        lastModified = nil
        totalLength = nil
        savedSegments = []
        infoDirty = true
        restartPending = nil
        control.setState(.restart(reason))
    }

    /// The `If-Range` value: the strong ETag, else Last-Modified. RFC 9110 §13.1.5 forbids weak ETags there.
    private var ifRangeValue: String? {
        if let tag = entityTag, !tag.isWeak { return tag.headerValue }
        return lastModified
    }

    /// Builds the request for the current offset.
    private func makeRequest() -> DKHTTPRequest {
        var headers = requestHeaders
        if offset > 0 {
            headers.replaceOrAdd(name: "Range", value: RangeHeader(ranges: [.from(offset)]).headerValue)
            if let validator = ifRangeValue { headers.replaceOrAdd(name: "If-Range", value: validator) }
        }
        return DKHTTPRequest(method: .GET, url: currentURL, headers: headers)
    }

    private func attempt(client: DKHTTPClient, buffer: ReceiveBuffer) throws -> AttemptOutcome {
        if let reason = restartPending {
            try restartFromZero(reason)
        }
        let probing = wantsSegments
        var httpRequest = makeRequest()
        if probing {
            // A one-byte probe learns the length, the validators and whether ranges work, without
            // committing to a body stream (the byte is drained and the connection reused).
            httpRequest.headers.replaceOrAdd(name: "Range", value: RangeHeader(ranges: [.closed(first: 0, last: 0)]).headerValue)
            // With partial data, If-Range turns a changed resource into a 200 instead of a 206.
            if let validator = ifRangeValue, offset > 0 || !savedSegments.isEmpty {
                httpRequest.headers.replaceOrAdd(name: "If-Range", value: validator)
            } else {
                httpRequest.headers.remove(name: "If-Range")
            }
        }
        let requestedOffset = offset
        rangeEnd = nil
        var outcome: AttemptOutcome = .bodyReceived
        var partDigest: (digest: DKDigest, expected: [UInt8])?
        guard let file else { throw DownloadError(.fileSystem, "the temp file is not open") }

        _ = try client.execute(
            httpRequest, cancellation: control.cancellation, buffer: buffer,
            onHead: { head in
                if probing, let decision = try self.decideProbe(head) {
                    outcome = decision
                    return .discard
                }
                let decision = try self.decide(head, requestedOffset: requestedOffset)
                outcome = decision
                guard case .bodyReceived = decision else { return .discard }
                if let md5Text = head.headers.first(name: "Content-MD5"), let md5 = try? ContentMD5(parsing: md5Text) {
                    partDigest = (DKDigest(.md5), md5.digest)
                }
                self.control.setState(.receive(resumedFrom: self.offset))
                // Nothing needs to see the bytes (no digest, no Content-MD5, no rate limit): let the
                // kernel move them from the socket to the file (plain HTTP, Content-Length bodies).
                if self.digest == nil, partDigest == nil, self.rateLimiters.isEmpty {
                    return .spliceToFile(fileDescriptor: file.fd, offset: self.offset)
                }
                return .stream
            },
            onBody: { bytes in
                if let end = self.rangeEnd, self.offset + Int64(bytes.count) > end + 1 {
                    throw DownloadError(
                        .contentRangeMismatch, "the 206 body runs past the end of its Content-Range (byte \(end))",
                        httpStatus: 206, isTransient: true)
                }
                try self.write(bytes, to: file)
                partDigest?.digest.update(bytes)
            },
            onSpliced: { count in
                try self.didWrite(count)
            })

        if case .bodyReceived = outcome {
            publishProgress()
            if let part = partDigest, part.digest.finalize() != part.expected {
                throw DownloadError(
                    .contentMD5Mismatch,
                    "checksum mismatch: the body does not match the server's Content-MD5 \(Base64.encode(part.expected))")
            }
            if let total = totalLength, offset > total {
                throw DownloadError(
                    .protocolViolation, "the server sent \(offset) bytes for a resource of \(total) bytes")
            }
        }
        return outcome
    }

    /// Decides what a response head means for the partial data. Mutates the engine's knowledge of the
    /// resource; the caller streams the body only for `.bodyReceived`.
    private func decide(_ head: ResponseHead, requestedOffset: Int64) throws -> AttemptOutcome {
        let status = head.status
        switch status {
        case 301, 302, 303, 307, 308:
            guard let location = head.headers.first(name: "Location") else {
                throw DownloadError(.invalidRedirect, "redirect \(status) without a Location header from \(currentURL)")
            }
            let target: HTTPURL
            do {
                target = try currentURL.resolving(location).withoutUserinfo
            } catch {
                throw DownloadError(
                    .insecureRedirect, "refusing redirect to \(location): \(error.detail)", httpStatus: status)
            }
            if currentURL.scheme == .https && target.scheme == .http && !configuration.allowsInsecureRedirects {
                throw DownloadError(
                    .insecureRedirect, "refusing redirect from https to http (\(target)); allow it explicitly",
                    httpStatus: status)
            }
            return .redirect(target)

        case 206, 416:
            return try decideRangeAnswer(head, requestedOffset: requestedOffset)
        case 200 where requestedOffset > 0:
            return try decideRangeAnswer(head, requestedOffset: requestedOffset)
        case 200:
            return try acceptWholeBody(head)

        default:
            if [401, 403, 404, 410].contains(status), configuration.urlProvider != nil {
                return .refreshURL(status: status)
            }
            if DownloadError.isTransientStatus(status), let retryAfter = head.headers.first(name: "Retry-After"),
                let parsed = try? RetryAfter(parsing: retryAfter)
            {
                pendingRetryAfter = Double(parsed.delay(fromSecondsSince1970: Int64(Date().timeIntervalSince1970)))
            }
            throw DownloadError.status(status, reason: head.reason, url: currentURL)
        }
    }

    /// The answer to a range request, decided by ``RangeResponsePolicy``; this only maps it to effects.
    private func decideRangeAnswer(_ head: ResponseHead, requestedOffset: Int64) throws -> AttemptOutcome {
        let status = head.status
        let policy = RangeResponsePolicy(
            first: requestedOffset, knownEntityTag: entityTag, knownLastModified: lastModified, knownTotal: totalLength)
        switch policy.decide(head) {
        case .write(_, let last, let total):
            rangeEnd = last
            if let total { totalLength = total }
            acceptsRanges = true
            control.isResumable = true
            recordValidators(head)
            try reserveSpace()
            try recordValidatorsCheckpoint()
            return .bodyReceived
        case .wholeBody(let reason):
            // Start over from zero in this same response.
            try restartFromZero(reason)
            return try acceptWholeBody(head)
        case .complete(let total):
            totalLength = total
            return .complete
        case .restart(let reason):
            return .restart(reason)
        case .retry(let detail):
            throw DownloadError(.contentRangeMismatch, detail, httpStatus: status, isTransient: true)
        case .other:
            throw DownloadError.status(status, reason: head.reason, url: currentURL)
        }
    }

    /// A 200: the body is the whole resource, written from byte 0.
    private func acceptWholeBody(_ head: ResponseHead) throws -> AttemptOutcome {
        totalLength = head.contentLength
        let ranges = head.headers.first(name: "Accept-Ranges").flatMap { try? AcceptRanges(parsing: $0) }
        acceptsRanges = ranges?.acceptsBytes ?? false
        recordValidators(head)
        let resumable = acceptsRanges == true || entityTag != nil || lastModified != nil
        control.isResumable = resumable
        if !resumable { control.setState(.notResumable) }
        resolveFileName(head)
        try reserveSpace()
        try recordValidatorsCheckpoint()
        return .bodyReceived
    }

    private func recordValidators(_ head: ResponseHead) {
        if let text = head.headers.first(name: "ETag") {
            entityTagText = text
            entityTag = try? EntityTag(parsing: text)
        }
        if let modified = head.headers.first(name: "Last-Modified") { lastModified = modified }
        infoDirty = true
    }

    private func resolveFileName(_ head: ResponseHead) {
        guard case .directory(_, let rule) = request.destination, fileName == nil else { return }
        let ext = originalURL.pathExtension
        switch rule {
        case .fileID(let id):
            fileName = FileNaming.fileName(
                forURL: originalURL.absoluteString, pathExtension: ext, fileID: id, md5Hex: Self.md5Hex)
        case .md5OfURL:
            fileName = FileNaming.fileName(
                forURL: originalURL.absoluteString, pathExtension: ext, fileID: nil, md5Hex: Self.md5Hex)
        case .fromResponse:
            let suggested = head.headers.first(name: "Content-Disposition")
                .flatMap { try? ContentDisposition(parsing: $0) }?.preferredFilename
                .flatMap(FileNaming.sanitizedFileName)
            fileName = suggested
                ?? currentURL.lastPathSegment.flatMap(FileNaming.sanitizedFileName)
                ?? FileNaming.fileName(
                    forURL: originalURL.absoluteString, pathExtension: ext, fileID: nil, md5Hex: Self.md5Hex)
        }
        infoDirty = true
    }

    /// Checks free space (statvfs `f_bavail`) for the remaining bytes and reserves it when possible.
    private func reserveSpace() throws {
        guard let total = totalLength, let file else { return }
        let remaining = total - offset
        guard remaining > 0 else { return }
        if let available = FileSystem.availableBytes(at: workingDirectory), available < remaining {
            throw DownloadError(
                .insufficientSpace,
                "not enough space in \(workingDirectory): \(remaining) bytes needed, \(available) available")
        }
        if configuration.preallocates {
            do {
                try file.reserve(offset: offset, length: remaining)
            } catch {
                throw DownloadError(
                    .insufficientSpace, "not enough space in \(workingDirectory) for \(remaining) bytes: \(error)")
            }
        }
    }

    // MARK: - Segments

    /// Whether the next request is a range probe for a segmented transfer.
    private var wantsSegments: Bool {
        !singleConnectionOnly && (configuration.connections > 1 || !savedSegments.isEmpty)
    }

    /// Decides on the answer to a `Range: bytes=0-0` probe. Returns nil when the ordinary rules apply
    /// (redirects, errors, and a 200, which is streamed as the whole file on one connection).
    private func decideProbe(_ head: ResponseHead) throws -> AttemptOutcome? {
        switch head.status {
        case 206:
            let policy = RangeResponsePolicy(
                first: 0, knownEntityTag: entityTag, knownLastModified: lastModified, knownTotal: totalLength)
            let complete: Int64
            switch policy.decide(head) {
            case .write(_, _, let total?):
                complete = total
            case .write(_, _, nil):
                settleOnOneConnection("the server did not report the file's length")
                return .probeDeclined
            case .restart(let reason):
                return .restart(reason)
            case .retry(let detail):
                throw DownloadError(
                    .contentRangeMismatch, "the range probe: \(detail)", httpStatus: 206, isTransient: true)
            case .wholeBody, .complete, .other:
                throw DownloadError(.internalError, "the range policy answered a 206 probe with something else than a range")
            }
            totalLength = complete
            acceptsRanges = true
            control.isResumable = true
            recordValidators(head)
            resolveFileName(head)
            if let reason = SegmentRules.oneConnectionReason(entityTag: entityTag, lastModified: lastModified) {
                settleOnOneConnection(reason)
                return .probeDeclined
            }
            let have = savedSegments.isEmpty ? offset : savedSegments.reduce(0) { $0 + $1.written }
            if savedSegments.isEmpty && complete - have < 2 * configuration.minimumSegmentSize {
                settleOnOneConnection("the file is too small to split")
                return .probeDeclined
            }
            try reserveSpace()
            return .segmented(total: complete)
        case 200:
            let hadPartial = (offset > 0 || !savedSegments.isEmpty) && ifRangeValue != nil
            let advertisesRanges = head.headers.first(name: "Accept-Ranges")
                .flatMap { try? AcceptRanges(parsing: $0) }?.acceptsBytes ?? false
            if hadPartial && advertisesRanges {
                // If-Range failed: the resource changed. Start over, and probe again.
                return .restart(.validatorChanged)
            }
            settleOnOneConnection("the server answered the range probe with the whole file (no range support)")
            if !savedSegments.isEmpty { try restartFromZero(.rangeIgnored) }
            return nil
        case 416:
            settleOnOneConnection("the file is empty")
            return .probeDeclined
        default:
            return nil
        }
    }

    private func settleOnOneConnection(_ reason: String) {
        singleConnectionOnly = true
        if configuration.connections > 1 { control.setState(.stayOnOneConnection(reason)) }
    }

    /// Runs segment workers over `[0, total)` (``SegmentCoordinator``) until every segment is written,
    /// then leaves the engine as if one connection had written the whole file.
    private func runSegments(total: Int64, client: DKHTTPClient) throws -> SegmentCoordinator.Outcome {
        guard let file else { throw DownloadError(.fileSystem, "the temp file is not open") }
        let coordinator = SegmentCoordinator(
            total: total, file: file, tempPath: tempPath, client: client, configuration: configuration, control: control,
            url: currentURL, headers: requestHeaders, ifRange: ifRangeValue, entityTag: entityTag,
            rateLimiters: rateLimiters, bufferSize: receiveBufferSize(client))
        let fetchedBefore = bytesThisRun
        let hooks = SegmentCoordinator.Hooks(
            started: { board in
                self.activeBoard = board
                self.savedSegments = board.snapshot()
                self.infoDirty = true
            },
            checkpoint: { force in try self.checkpoint(force: force) },
            publish: { received, fetched, connections, now in
                self.publishProgress(received: received, thisRun: fetchedBefore + fetched, connections: connections, now: now)
            })
        defer { activeBoard = nil }
        let report: SegmentCoordinator.Report
        do {
            report = try coordinator.run(saved: savedSegments, prefix: offset, hooks: hooks)
        } catch let failure as SegmentCoordinator.Failure {
            bytesThisRun += failure.report.fetched
            throw failure.error
        }
        bytesThisRun += report.fetched
        resumedFrom += report.recovered
        if case .restart = report.outcome {
            guard let delay = segmentRestarts.next(base: configuration.retryBaseDelay.asSeconds, maximum: configuration.maxRetryDelay.asSeconds) else {
                throw DownloadError(
                    .serverIgnoredRange,
                    "the resource changed during \(segmentRestarts.count + 1) segmented attempts in a row; giving up")
            }
            if !interruptibleSleep(delay, shouldStop: { control.stopRequest != .none }) {
                throw DownloadError(.cancelled, "stopped")
            }
        }
        guard report.outcome == .complete, let board = activeBoard else { return report.outcome }
        savedSegments = board.snapshot()
        offset = total
        if let checksum = request.checksum {
            // Segments finish out of order: hash the whole file once, at the end.
            let digest = DKDigest(checksum.algorithm)
            try hashPrefix(into: digest, count: total, from: file)
            self.digest = digest
        }
        return .complete
    }

    /// Bytes contiguous from offset 0 in a segment map.
    static func contiguousPrefix(_ segments: [ResumeSegment]) -> Int64 {
        SegmentBoardState.contiguousPrefix(segments)
    }

    // MARK: - Body, progress, checkpoints

    private func write(_ bytes: UnsafeRawBufferPointer, to file: FileHandleFD) throws {
        var written = 0
        do {
            try file.write(bytes, toAbsoluteOffset: offset, written: &written)
        } catch {
            // Keep whatever reached the file, make it durable, then stop resumably.
            offset += Int64(written)
            if written > 0 { digest?.update(UnsafeRawBufferPointer(rebasing: bytes[0..<written])) }
            throw error
        }
        digest?.update(bytes)
        try didWrite(bytes.count)
    }

    /// Accounts for `count` bytes now in the temp file at `offset` (written here or spliced there by
    /// the kernel): progress, checkpoints, the low-speed limit and rate limits.
    private func didWrite(_ count: Int) throws {
        offset += Int64(count)
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
        try checkLowSpeed(now: now, received: count)
        if !TokenBucket.wait(rateLimiters, afterConsuming: count, shouldStop: { control.stopRequest != .none }) {
            throw DownloadError(.cancelled, "stopped")
        }
    }

    private func checkLowSpeed(now: Double, received: Int) throws {
        guard configuration.lowSpeedLimit > 0 else { return }
        if lowSpeedWindowStart == 0 { lowSpeedWindowStart = now }
        lowSpeedWindowBytes += Int64(received)
        let elapsed = now - lowSpeedWindowStart
        guard elapsed >= configuration.lowSpeedTime.asSeconds else { return }
        let rate = Double(lowSpeedWindowBytes) / elapsed
        lowSpeedWindowStart = now
        lowSpeedWindowBytes = 0
        if rate < Double(configuration.lowSpeedLimit) {
            throw DownloadError(
                .tooSlow,
                "transfer too slow: \(Int(rate)) bytes/s for \(Int(elapsed)) s, below the limit of \(configuration.lowSpeedLimit) bytes/s",
                isTransient: true)
        }
    }

    private func publishProgress(now: Double = monotonicSeconds()) {
        publishProgress(received: offset, thisRun: bytesThisRun, connections: 1, now: now)
    }

    /// Publishes a snapshot: `received` bytes of the file present, `thisRun` of them fetched by this run.
    private func publishProgress(received: Int64, thisRun: Int64, connections: Int, now: Double) {
        speed.record(totalBytes: thisRun, at: now)
        lastProgressTime = now
        let rate = speed.bytesPerSecond
        var remaining: Double?
        if let total = totalLength, rate > 0 { remaining = Double(max(0, total - received)) / rate }
        control.publish(
            DownloadProgress(
                bytesReceived: received, totalBytes: totalLength, bytesThisRun: thisRun, bytesPerSecond: rate,
                timeRemaining: remaining.map { .seconds($0) }, activeConnections: connections))
    }

    /// Records what a response head taught (validators, length, name) before any of its body bytes
    /// are written. It claims no new bytes, so it skips every `fsync`: a process crash keeps it (the page
    /// cache survives), a power loss only loses the validators and falls back to the temp file's length.
    /// Small files thus pay two syncs in all (data, then the directory after the rename), not six.
    private func recordValidatorsCheckpoint() throws {
        checkpointQueue.sync {}
        applyBackgroundSync()
        if let failure = backgroundCheckpoint.takeFailure() { throw failure }
        guard infoDirty else { return }
        try currentResumeInfo().write(to: infoPath, durable: false)
        infoDirty = false
        lastCheckpointTime = monotonicSeconds()
    }

    /// Makes the written bytes durable, then records them in the resume info (atomically).
    /// Skipped when nothing changed since the last checkpoint.
    private func checkpoint(force: Bool) throws {
        guard let file else { return }
        lastCheckpointTime = monotonicSeconds()
        if let board = activeBoard {
            // Snapshot first, sync second: the map never claims bytes the sync did not cover.
            let snapshot = board.snapshot()
            try file.syncData()
            savedSegments = snapshot
            offset = Self.contiguousPrefix(snapshot)
            durableOffset = offset
            infoDirty = false
            try currentResumeInfo().write(to: infoPath)
            return
        }
        applyBackgroundSync()
        if let failure = backgroundCheckpoint.takeFailure() { throw failure }
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
            let shared = SharedFile(handle: file)
            let path = infoPath
            let state = backgroundCheckpoint
            checkpointQueue.async {
                do {
                    try shared.handle.syncData()
                    state.synced(claimed)
                    try info.write(to: path)
                    state.end(failure: nil)
                } catch {
                    state.end(failure: error)
                }
            }
            return
        }
        checkpointQueue.sync {}
        applyBackgroundSync()
        if let failure = backgroundCheckpoint.takeFailure() { throw failure }
        try file.syncData()
        durableOffset = offset
        infoDirty = false
        try currentResumeInfo().write(to: infoPath)
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
        checkpointQueue.sync {}
        _ = backgroundCheckpoint.takeSynced()
    }

    func currentResumeInfo() -> ResumeInfo {
        var info = ResumeInfo(
            originalURL: originalURL.withoutUserinfo.absoluteString, currentURL: currentURL.withoutUserinfo.absoluteString,
            tempFilePath: absolutePath(tempPath),
            bytesReceived: savedSegments.isEmpty ? max(0, durableOffset) : Self.contiguousPrefix(savedSegments))
        info.segments = savedSegments
        info.entityTag = entityTagText
        info.lastModified = lastModified
        info.destinationPath = destinationPath.map(absolutePath)
        info.fileName = fileName
        info.totalLength = totalLength
        info.acceptsRanges = acceptsRanges
        info.created = created
        info.updated = Date()
        info.bootID = FileSystem.bootID
        if let checksum = request.checksum {
            info.checksum = ResumeChecksum(algorithm: checksum.algorithm.rawValue, expectedHex: checksum.expectedHex)
        }
        return info
    }

    // MARK: - Finishing

    private func finalize() throws -> DownloadResult {
        guard let file else { throw DownloadError(.fileSystem, "the temp file is not open") }
        checkpointQueue.sync {}
        control.setState(.verify)
        if let total = totalLength, offset != total {
            throw DownloadError(
                .truncated, "truncated: expected \(total) bytes, received \(offset)", isTransient: true)
        }
        try file.syncData()
        durableOffset = offset
        var checksumHex: String?
        if let checksum = request.checksum, let digest {
            let hex = DKDigest.hex(digest.finalize())
            self.digest = nil
            checksumHex = hex
            if hex != checksum.expectedHex {
                throw DownloadError(
                    .checksumMismatch,
                    "checksum mismatch: \(checksum.algorithm.rawValue) of the download is \(hex), expected \(checksum.expectedHex)")
            }
        }
        // The partial was private (0600) while incomplete; the finished file gets the usual 0644.
        _ = fchmod(file.fd, 0o644)
        // Validators and the URL go on the inode before the rename, so the finished file carries them
        // from its first instant: a manager that dies between this rename and its task row's update
        // recognises the file as this task's on restart instead of downloading it again.
        FinishedFileValidators.record(
            entityTag: entityTagText, lastModified: lastModified, url: originalURL.withoutUserinfo.absoluteString,
            fd: file.fd)
        let destination = try placeFinalFile()
        // Whether this unlink survives a power loss does not matter: a resume-info file without its
        // temp file only makes a rerun download again.
        try FileSystem.remove(infoPath)
        SegmentJournal.remove(forTempFile: tempPath)
        ResumeInfo.removeStaleTemporaryFiles(for: infoPath)
        // The lock on the partial is released only now, after the rename and the cleanup.
        self.file = nil
        publishProgress()
        control.setState(.complete)
        return DownloadResult(
            path: destination, bytes: offset, resumedFrom: resumedFrom, bytesTransferred: bytesThisRun,
            finalURL: currentURL.absoluteString, checksumHex: checksumHex,
            isResumable: control.isResumable ?? (acceptsRanges == true), entityTag: entityTagText,
            lastModified: lastModified)
    }

    /// Renames the partial into place. `-o FILE` replaces the file the caller named; a directory
    /// destination never replaces an existing file: it takes the first free name of
    /// ``FileNaming/freeNameCandidates(for:)`` (docs/ENGINE.md, "Final names").
    private func placeFinalFile() throws -> String {
        let destination = try finalDestination()
        guard case .directory(let directory, _) = request.destination else {
            try FileSystem.moveDurably(from: tempPath, to: destination)
            return destination
        }
        for name in FileNaming.freeNameCandidates(for: FileSystem.lastComponent(of: destination)) {
            let path = FileSystem.join(directory, name)
            guard FileNaming.isContained(path, in: directory) else { continue }
            if try FileSystem.moveDurablyWithoutReplacing(from: tempPath, to: path) { return path }
        }
        throw DownloadError(
            .fileSystem, "\(destination) and its 99 numbered alternatives exist; refusing to overwrite any of them")
    }

    private func finalDestination() throws -> String {
        switch request.destination {
        case .file(let path):
            return path
        case .directory(let directory, _):
            let name = fileName
                ?? FileNaming.fileName(
                    forURL: originalURL.absoluteString, pathExtension: originalURL.pathExtension, fileID: nil,
                    md5Hex: Self.md5Hex)
            let path = FileSystem.join(directory, name)
            guard FileNaming.isContained(path, in: directory) else {
                throw DownloadError(.fileSystem, "refusing to write \(name) outside \(directory)")
            }
            return path
        }
    }

    // MARK: - Helpers

    /// Resume info stores absolute paths; relative ones are taken from the current directory.
    private func absolutePath(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        let cwd = FileManager.default.currentDirectoryPath
        return FileSystem.join(cwd, path.hasPrefix("./") ? String(path.dropFirst(2)) : path)
    }

    static func md5Hex(_ text: String) -> String {
        DKDigest.hex(DKDigest.hash(.md5, Array(text.utf8)))
    }


    /// Calls the async URL provider from this (non-async) engine thread.
    private static func callProvider(
        _ provider: @escaping @Sendable (URLRefreshContext) async -> String?, _ context: URLRefreshContext
    ) -> String? {
        let box = ResultBox()
        let done = DispatchSemaphore(value: 0)
        Task {
            box.value = await provider(context)
            done.signal()
        }
        done.wait()
        return box.value
    }
}

/// Carries the URL provider's answer from its task to the waiting engine thread. The semaphore's
/// signal/wait orders the write before the read, hence `@unchecked Sendable`.
private final class ResultBox: @unchecked Sendable {
    var value: String?
}

extension ResponseHead {
    /// The body length from `Content-Length`, when present and valid.
    var contentLength: Int64? {
        guard let text = headers.first(name: "Content-Length"), !text.isEmpty, text.allSatisfy(\.isASCII),
            text.allSatisfy(\.isNumber)
        else { return nil }
        return Int64(text)
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
