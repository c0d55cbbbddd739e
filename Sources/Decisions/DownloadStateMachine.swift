import HTTPWire

/// Every decision of one download, as a value: events in, actions out (issue #12; the shape of
/// AsyncHTTPClient's `HTTPRequestStateMachine`). It owns what is known about the resource and the
/// partial data and the request loop's bookkeeping (redirects, URL refreshes, retries, restarts). It
/// performs nothing: each event answers with a ``Decision`` — the ``Effect``s to perform first (the
/// (state, reason) transitions to publish, a changed record) and the action — which `TransferEngine`
/// executes (send a request, truncate, reserve space, write the resume info, wait, rename) before it
/// reports back what happened. No socket, no file, no clock: `DownloadStateMachineTests` drives it as tables.
///
/// The loop, as the executor runs it (docs/ARCHITECTURE.md, "The download state machine"):
///
///     start() ─► .send ─► responseHead() ─► .discard ──────────────┐
///                               │        └► .write ─► bodyStarts() ─┤ (body bytes: bodyWritten)
///                               └► .abandon(error) ─► failed() ─────┤
///                                                                   ▼
///                         exchangeEnded() ─► .send | .runSegments | .askForURL | .retry | .backOff | .finalize | .fail
///
/// No randomness either: the events that may decide a wait (``exchangeEnded(jitter:)``,
/// ``failed(_:stopRequested:jitter:)``, ``urlProvided(_:jitter:)``, ``segmentsEnded(_:map:jitter:)``) carry
/// `jitter` in `0...1`, the executor's draw for the backoff (``RetryPolicy/backoffDelay(attempt:base:maximum:jitter:)``).
///
/// An action carries what the executor needs to perform it (``BodyWrite``, ``SegmentRun``,
/// ``MachineRequest``): the executor decides nothing from the machine's fields and reads ``resource`` only to
/// perform (where the next streamed byte goes, progress, the record, the result).
///
/// File names: a directory download named from the response takes the name the response suggests, which
/// arrives sanitised with the head (``responseHead(_:suggestedFileName:wallClock:)``). Sanitising needs
/// Unicode NFC normalisation, which only Foundation offers on Linux (Swift 6.3's standard library has no
/// public one), and the decisions module keeps Foundation out; so DownloadKit computes the suggestion from
/// the head and the URL the request went to, in one function (`FileNaming.suggestedFileName(for:at:)`), as it
/// computes the name a naming rule gives (``Settings/ruleFileName``). Whether a download takes a name, and
/// from which answer (the accepted 200, or the probe's 206; once), is decided here.
///
/// Errors: the machine is generic over its `Failure`, the caller's error. It reads a failure it is told of
/// through ``MachineError`` (transient, cancelled) and makes its own from a ``MachineFailure`` value naming
/// the cause, never from a message of its own; DownloadKit's `DownloadError.init(decided:)` gives each its
/// code and message, and DownloadKit drives `DownloadStateMachine<DownloadError>` (its `EngineMachine`). Its
/// transitions (``MachineTransition``) and requests (``MachineRequest``) are this module's values too, as are
/// its record (``MachineRecord``), its settings' checksums (``Checksum``, ``PieceChecksums``) and the digest
/// header's rules (``RFC6249``): the module depends on HTTPWire alone, so the compiler keeps sockets, files
/// and clocks out of the machine. Its settings are made from the request and the configuration in DownloadKit
/// (Engine/DownloadStateMachine+Settings.swift).
///
/// Segment workers are its sub-state: ``Action/runSegments(_:)`` hands the range `[0, total)` to
/// `SegmentCoordinator` (whose own decisions are the pure ``SegmentBoardState``), and
/// ``segmentsEnded(_:)`` takes the outcome back. Answers to range requests are decided by the one
/// ``RangeResponsePolicy``, failures by the one ``RetryPolicy``.
package struct DownloadStateMachine<Failure: MachineError>: Sendable {
    /// A transition the machine publishes (mapped to the library's `DownloadTransition` in one place).
    package typealias Transition = MachineTransition<Failure>

    /// The request and configuration facts the decisions depend on. DownloadKit makes them from its request and
    /// configuration (`Settings.init(_:_:)`, the one place that reads them for the machine); a value made here
    /// asks for nothing but its destination: one connection, no redirect, no retry, no check.
    package struct Settings: Sendable, Hashable {
        package var destination: DownloadDestination
        /// The request's header fields (credentials among them).
        package var headers = DKHTTPHeaders()
        /// Fields beyond `Authorization`, `Cookie` and `Proxy-Authorization` that carry credentials.
        package var credentialHeaderNames: [String] = []
        /// The connections a download may open at once: with more than one, the download is segmented.
        package var connections = 1
        /// The request's mirrors (docs/MIRRORS.md): with any, the download is segmented, and a segmented run's
        /// requests go to them too (``SegmentRun/sources``).
        package var mirrors: [HTTPURL] = []
        /// The most `Link: rel=duplicate` targets of the accepted response (RFC 6249) a segmented run adds as
        /// mirrors; 0: none.
        package var maxLinkMirrors = 0
        /// The request's URL plus its mirrors: with more than one, the download is segmented.
        package var sourceCount: Int { 1 + mirrors.count }
        /// The request's piece checksums: segmented too, so a bad piece can be fetched again alone.
        package var pieceChecksums: PieceChecksums?
        /// Whether the request has piece checksums.
        package var hasPieceChecksums: Bool { pieceChecksums != nil }
        /// The smallest segment worth a connection of its own (bytes).
        package var minimumSegmentSize: Int64 = 0
        /// The redirects followed from the original URL before the download fails.
        package var maxRedirects = 0
        /// Whether a redirect from https to http is followed.
        package var allowsInsecureRedirects = false
        /// Whether the caller gave a URL provider (asked after 401, 403, 404, 410), and how many times it may be asked.
        package var hasURLProvider = false
        package var maxURLRefreshes = 0
        /// The retries of transient failures, and their backoff's base and bound (seconds).
        package var retries = 0
        package var retryBaseDelay: Double = 0
        package var maxRetryDelay: Double = 0
        /// The checksum the caller requires of the whole file.
        package var checksum: Checksum?
        /// Whether a digest header of the response (RFC 6249) is verified when the caller gave no checksum.
        package var checksDigestHeader = false
        /// The low-speed rule's limit (bytes/s, 0: off) and window (seconds).
        package var lowSpeedLimit = 0
        package var lowSpeedTime: Double = 0
        /// Whether space for the remaining bytes may be reserved in the file, not only checked.
        package var preallocates = false
        /// The single-connection bodies gathered and written past the page cache; nil when direct writes are off.
        package var smallBodies: SmallBodyRule?
        /// A directory destination's name when no response names the file: the caller's file id (``FileNamingRule/fileID(_:)``),
        /// else the MD5 of the original URL, with the URL path's extension. Made with the settings, where the
        /// digest is computed (DownloadKit's `FileNaming.fileName(forURL:pathExtension:fileID:md5Hex:)`); nil for a
        /// file destination.
        package var ruleFileName: String?

        /// Settings for a download into `destination` that asks for nothing else (the defaults above).
        package init(destination: DownloadDestination) {
            self.destination = destination
        }
    }

    /// What is known about the resource and the partial data.
    package struct Resource: Sendable, Hashable {
        /// Bytes of the resource present in the partial from byte 0 (single connection), or the
        /// contiguous prefix of the segment map.
        package var offset: Int64 = 0
        /// Bytes that were present when this run started (resumed, not fetched).
        package var resumedFrom: Int64 = 0
        package var totalLength: Int64?
        package var entityTag: EntityTag?
        /// The `ETag` field as the server sent it (recorded verbatim).
        package var entityTagText: String?
        package var lastModified: String?
        package var acceptsRanges: Bool?
        /// Whether the server can resume this resource (nil until a response said).
        package var isResumable: Bool?
        /// A name decided from a response (directory destinations only).
        package var fileName: String?
        /// The segment map of a segmented download; empty on one connection.
        package var savedSegments: [ResumeSegment] = []

        /// The `If-Range` value: the strong ETag, else Last-Modified. RFC 9110 §13.1.5 forbids weak ETags there.
        package var ifRangeValue: String? {
            if let tag = entityTag, !tag.isWeak { return tag.headerValue }
            return lastModified
        }
    }

    // The cases with large payloads (a request, a segment run, an error) are boxed (`indirect`): the
    // executor's loop keeps several actions in its frame, which stays on the stack under every exchange of
    // every transfer thread; boxed, an action is a word or two, for one allocation per step
    // (docs/BENCHMARKS.md, "Stacks at 1,024 transfers"). The failures of the answers below are boxed for
    // the same reason, and are built only when something fails.
    /// What the executor does next.
    package enum Action: Sendable, Hashable {
        /// Send `request`; when `restart` is set, first discard the partial data (truncate to 0, forget
        /// the journal and any background sync, start the checksum again).
        indirect case send(MachineRequest, restart: RestartReason?)
        /// Reserve the run's space, then run segment workers over `[0, total)` and report with
        /// ``segmentsEnded(_:map:jitter:)``.
        indirect case runSegments(SegmentRun)
        /// Ask the URL provider for a fresh URL and report with ``urlProvided(_:)``.
        indirect case askForURL(URLRefreshContext)
        /// Checkpoint, wait `after` seconds (interruptible), then report ``retryDelayElapsed()``.
        indirect case retry(after: Double, attempt: Int, error: Failure)
        /// Wait `seconds` before starting the resource over (a segmented transfer saw it change), then
        /// report ``retryDelayElapsed()``.
        case backOff(seconds: Double)
        /// The partial holds the whole resource: verify it and move it into place.
        case finalize
        /// The existing destination is current (a `304` to the conditional first request,
        /// ``existingDestination(_:policy:)``): remove the working files and keep it.
        case keepExisting
        /// Give up with this error (the executor keeps the partial data as its stop rules say).
        indirect case fail(Failure)
    }

    /// What to do with the body of a response whose head just arrived.
    package enum HeadAction: Sendable, Hashable {
        /// Do not write the body (drain it so the connection can be reused); report ``exchangeEnded()``.
        case discard
        /// Write the body as ``BodyWrite`` says: first discard the partial when its `restart` is set, then
        /// reserve space, record the validators (resume info, no sync), report ``bodyStarts()`` and
        /// stream. Report ``exchangeEnded()`` after the last byte.
        case write(BodyWrite)
        /// Abort the exchange with this error and report it with ``failed(_:stopRequested:)``.
        indirect case abandon(Failure)
    }

    /// How the body of an accepted response is written: everything the executor would otherwise have to
    /// read from the machine to decide, decided here.
    package struct BodyWrite: Sendable, Hashable {
        /// Discard the partial data first (truncate to 0, forget the journal and any background sync, start
        /// the checksum again): the body is the resource from byte 0.
        package var restart: RestartReason?
        /// The file offset of the body's first byte.
        package var offset: Int64
        /// The space to check (and reserve) before the first byte; nil when the length is unknown or
        /// nothing is left.
        package var reserve: SpaceReservation?
        /// The response states a `Content-MD5`: hash the body as it is written and report the digest with
        /// ``bodyDigested(_:)``.
        package var hashesMD5: Bool
        /// The body's length when it is small enough to gather whole (``Settings/smallBodies``) and write in
        /// one piece past the page cache; nil: splice or stream it.
        package var gather: Int64?
    }

    /// What a segmented run starts from (``Action/runSegments(_:)``): its length, the space to reserve, the
    /// saved map and the bytes present from byte 0, where requests go, and the validators each range
    /// request carries (`If-Range`) and each response must match.
    package struct SegmentRun: Sendable, Hashable {
        /// The resource's length.
        package var total: Int64
        /// The space to check and reserve before the workers start.
        package var reserve: SpaceReservation?
        /// The segment map saved by an earlier run (empty: none).
        package var saved: [ResumeSegment]
        /// Bytes present from byte 0 (a single-connection prefix, or the saved map's contiguous prefix).
        package var prefix: Int64
        /// Where the range requests go (the URL after redirects and refreshes).
        package var url: HTTPURL
        /// Their header fields: the request's, less credentials a redirect to another origin removed.
        package var headers: DKHTTPHeaders
        /// The `If-Range` each range request carries, and the validators each response must match.
        package var ifRange: String?
        package var entityTag: EntityTag?
        package var lastModified: String?
        /// The sources the workers' requests go to, in order (docs/MIRRORS.md): ``url`` with ``headers``, then
        /// each of the request's mirrors, then the accepted response's `Link: rel=duplicate` targets; empty
        /// when there is no mirror (one source, ``url``). Each carries its own fields: credentials only to a
        /// mirror of the original URL's origin, never to a linked one.
        package var sources: [MachineRequest]
        /// How many of the last ``sources`` the Link header added (the executor logs them).
        package var linkedMirrors: Int
    }

    /// What the executor performs before the action of a decision, in order.
    package enum Effect: Sendable, Hashable {
        /// Publish this (state, reason) transition.
        case publish(Transition)
        /// What the resume info records (URLs, validators, length, name) changed: the next checkpoint
        /// writes it even when no byte was added.
        case recordChanged
        /// Whether the server can resume this resource, as the last accepted response said.
        case resumable(Bool)

        /// The transition this effect publishes, if it is one.
        package var transition: Transition? {
            if case .publish(let transition) = self { transition } else { nil }
        }
    }

    /// The answer to an event: the effects to perform first, in order, then what to do next. The
    /// transitions and the record's changes travel with the action they belong to, so the executor
    /// needs nothing else from the machine to act.
    package struct Decision<Next: Sendable & Hashable>: Sendable, Hashable {
        package var effects: [Effect]
        package var next: Next

        /// An answer: `effects` to perform first, in order, then `next`.
        package init(effects: [Effect], next: Next) {
            self.effects = effects
            self.next = next
        }

        /// The transitions among ``effects``, in order.
        package var transitions: [Transition] {
            effects.compactMap(\.transition)
        }
    }

    /// Where the loop is.
    package enum State: Sendable, Hashable {
        case idle
        /// A request is out; its head has not arrived.
        case awaitingHead(Exchange)
        /// The body of an accepted response is being written.
        case receivingBody(Exchange)
        /// The head was decided and the body is not wanted; what follows once the exchange ends.
        case draining(Exchange, Next)
        case segmented(total: Int64)
        case waitingToRetry
        case backingOff(RestartReason)
        case waitingForURL(status: Int)
        case finishing
        case failed
    }

    /// One request and what was learned of its answer.
    package struct Exchange: Sendable, Hashable {
        /// The first byte the request asked for.
        package var requestedOffset: Int64
        /// A `bytes=0-0` probe for a segmented transfer.
        package var probing: Bool
        /// The last byte the accepted 206 may carry (its Content-Range end); nil for a 200.
        package var rangeEnd: Int64?
        /// The request carried the conditions of ``existingDestination(_:policy:)``.
        package var conditional = false
    }

    /// What a decided head leads to once its exchange ends.
    package enum Next: Sendable, Hashable {
        case redirect(HTTPURL)
        case refreshURL(status: Int)
        case restart(RestartReason)
        case segmented(total: Int64)
        case complete
        /// The probe settled on one connection: send the ordinary request next.
        case oneConnection
        /// A `304` to the conditional request: the existing file stays.
        case notModified
    }

    /// What the request and the configuration ask for.
    package let settings: Settings
    /// Where the loop is (read by tests and for diagnostics; the executor acts on answers only).
    package private(set) var state: State = .idle
    /// What is known of the resource and the partial, read-only, for *performing* effects: where the next
    /// body byte goes, the progress numbers, the record the executor writes and the result it returns.
    /// Nothing is decided from it: each decision the executor needs travels in an answer.
    ///
    /// A stored property on purpose, and every question the executor asks is a `mutating` event: the
    /// executor, in another module, reads a stored property of the machine in place, but a computed
    /// property or a non-mutating method called there, unspecialised, got a copy of the whole machine
    /// (about 1 KB) on the caller's stack — one in every frame of the body path, where a transfer
    /// thread's stack is deepest (docs/BENCHMARKS.md, "Stacks at 1,024 transfers").
    package private(set) var resource = Resource()
    /// The task's identity: the URL first asked for (redirects and refreshes never change it).
    package private(set) var originalURL: HTTPURL
    /// Where requests go now (after redirects and refreshes).
    package private(set) var currentURL: HTTPURL
    /// The request's headers, less credentials a redirect to another origin removed.
    package private(set) var requestHeaders: DKHTTPHeaders
    /// The head of the response accepted last (its status and fields go into the result).
    package private(set) var acceptedHead: ResponseHead?

    private var restartPending: RestartReason?
    private var singleConnectionOnly = false
    private var redirects = 0
    private var visited: Set<String>
    private var refreshes = 0
    private var retry: RetryPolicy
    private var restarts = RestartPolicy()
    private var lowSpeed: LowSpeedWindow
    private var pendingRetryAfter: Double?
    /// Conditions (`If-None-Match`, `If-Modified-Since`) for the requests until the resource answers
    /// with something other than a redirect (``existingDestination(_:policy:)``).
    private var conditions: DKHTTPHeaders?
    /// The offset when the current attempt began (a retry's progress is measured from it).
    private var attemptStart: Int64 = 0
    /// The effects decided since the last answer; the next answer hands them out. The record counts as
    /// changed from the start: the first checkpoint always writes it.
    private var outbox: [Effect] = [.recordChanged]
    /// Whether `outbox` holds ``Effect/recordChanged`` (at most once an answer). Kept beside it rather than
    /// searched for: `contains` over the effects is the generic `Equatable` of a type generic over
    /// `Failure`, unspecialised from the executor's module — metadata lookups and value witnesses that were
    /// the deepest frames of a transfer thread, under a response head.
    private var recordChangeQueued = true

    /// A machine for the download of `url` (its identity) with `settings`, before anything is known of the
    /// resource or a partial.
    package init(url: HTTPURL, settings: Settings) {
        self.settings = settings
        originalURL = url
        currentURL = url
        requestHeaders = settings.headers
        visited = [url.absoluteString]
        retry = RetryPolicy(retries: settings.retries, baseDelay: settings.retryBaseDelay, maxDelay: settings.maxRetryDelay)
        lowSpeed = LowSpeedWindow(limit: settings.lowSpeedLimit, seconds: settings.lowSpeedTime)
    }

    // MARK: - Effects

    /// `next`, with the effects decided since the last answer.
    private mutating func decided<Next>(_ next: Next) -> Decision<Next> {
        Decision(effects: takeEffects(), next: next)
    }

    private mutating func takeEffects() -> [Effect] {
        defer {
            outbox.removeAll(keepingCapacity: true)
            recordChangeQueued = false
        }
        return outbox
    }

    private mutating func announce(_ transition: Transition) {
        outbox.append(.publish(transition))
    }

    private mutating func recordChanges() {
        guard !recordChangeQueued else { return }
        recordChangeQueued = true
        outbox.append(.recordChanged)
    }

    private mutating func learnResumable(_ resumable: Bool) {
        resource.isResumable = resumable
        outbox.append(.resumable(resumable))
    }

    // MARK: - Verdicts on the bytes

    /// The machine's answer to what the executor observed of the bytes.
    package enum Verdict: Sendable, Hashable {
        /// The bytes are as they should be: go on.
        case goOn
        /// End the step with this failure (the executor reports it with ``failed(_:stopRequested:jitter:)``,
        /// which retries or gives up).
        indirect case fail(Failure)
    }

    /// The answer to ``verifying()``: what the executor checks before the rename.
    package enum Verification: Sendable, Hashable {
        /// The partial cannot be the resource (short, or the piece table does not describe its length).
        indirect case fail(Failure)
        /// Make the partial durable, then report the digest of each of `pieces` (when given) with
        /// ``piecesDigested(_:)`` and the file's `checksum` (when given) with ``fileDigested(_:)``.
        case check(pieces: PieceChecksums?, checksum: FinalChecksum?)
    }

    /// `count` more body bytes arrived (received, not yet reported with ``bodyWritten(_:)``): they fail the
    /// exchange when they run past the end of the accepted 206's Content-Range (the bytes after it belong
    /// to no byte asked for here).
    package mutating func bodyArriving(_ count: Int64) -> Verdict {
        guard case .receivingBody(let exchange) = state, let end = exchange.rangeEnd, resource.offset + count > end + 1
        else { return .goOn }
        return .fail(Failure(decided: .bodyPastRange(lastByte: end)))
    }

    /// `count` body bytes arrived at `now` (seconds, any monotonic clock): they fail the transfer when it
    /// stayed below the low-speed limit over its window (``LowSpeedWindow``; transient: a retry may find a
    /// faster path). The window runs over the whole run, across exchanges.
    package mutating func received(_ count: Int, now: Double) -> Verdict {
        guard let rate = lowSpeed.record(count, now: now) else { return .goOn }
        return .fail(
            Failure(decided: .tooSlow(bytesPerSecond: Int(rate), seconds: Int(lowSpeed.seconds), limit: lowSpeed.limit)))
    }

    /// The MD5 digest the accepted response states for its body (`Content-MD5`, RFC 1864), when it has a
    /// valid one: ``BodyWrite/hashesMD5`` asks the executor to hash the body and report with ``bodyDigested(_:)``.
    private var statedContentMD5: [UInt8]? {
        guard case .receivingBody = state else { return nil }
        return acceptedHead?.headers.first(name: "Content-MD5").flatMap { try? ContentMD5(parsing: $0) }?.digest
    }

    /// The MD5 digest of the body just written: a failure when it is not the one the response stated —
    /// the body is not what the server says it sent.
    package mutating func bodyDigested(_ computed: [UInt8]) -> Verdict {
        guard let stated = statedContentMD5, stated != computed else { return .goOn }
        return .fail(Failure(decided: .contentMD5Mismatch(stated: stated)))
    }

    /// The whole-file checksum ``Action/finalize`` verifies.
    package enum FinalChecksum: Sendable, Hashable {
        /// The caller's (`DownloadRequest.checksum`): the executor hashes the bytes as they are written.
        case requested(Checksum)
        /// The one the accepted response's digest header states (RFC 6249): the executor hashes the file.
        case stated(Checksum)
    }

    /// The checksum to verify before the rename: the caller's, else — when the configuration checks digest
    /// headers — the one the accepted response states for the whole file; nil when there is none.
    package var finalChecksum: FinalChecksum? {
        if let checksum = settings.checksum { return .requested(checksum) }
        guard settings.checksDigestHeader, let head = acceptedHead, let stated = RFC6249.checksum(in: head, total: resource.offset)
        else { return nil }
        return .stated(stated)
    }

    /// ``Action/finalize`` begins: the partial must hold the resource's length (else it is truncated,
    /// transient: a retry asks for the rest). Piece checksums of a download that ran on one connection
    /// had no piece checked as it arrived: they are all checked now.
    package mutating func verifying() -> Verification {
        if let total = resource.totalLength, resource.offset != total {
            return .fail(Failure(decided: .truncated(expected: total, received: resource.offset)))
        }
        var pieces: PieceChecksums?
        if let table = settings.pieceChecksums, resource.savedSegments.isEmpty {
            if let failure = pieceTableFailure(total: resource.offset) { return .fail(failure) }
            pieces = table
        }
        return .check(pieces: pieces, checksum: finalChecksum)
    }

    /// The digest of each piece of a download that ran on one connection, in order: the first bad one
    /// fails the download, naming the piece (nothing can be fetched again alone without ranges).
    package mutating func piecesDigested(_ digests: [[UInt8]]) -> Verdict {
        guard let table = settings.pieceChecksums else { return .goOn }
        let total = resource.offset
        var verifier = PieceVerifier(pieceLength: table.pieceLength, total: total, sourceCount: 1, runs: [0..<total])
        for piece in verifier.unchecked {
            let good = digests.indices.contains(piece) && table.digests.indices.contains(piece)
                && digests[piece] == table.digests[piece]
            guard verifier.checked(piece, good: good, eligible: []).next == .fail else { continue }
            return .fail(
                Failure(
                    decided: .pieceMismatch(
                        piece: piece, range: table.range(ofPiece: piece, total: total), algorithm: table.algorithm.rawValue)))
        }
        return .goOn
    }

    /// The digest the executor computed of the whole file (lowercase hex): a failure naming both when it
    /// is not the ``finalChecksum``.
    package mutating func fileDigested(_ computedHex: String) -> Verdict {
        switch finalChecksum {
        case nil:
            return .goOn
        case .requested(let checksum):
            guard computedHex != checksum.expectedHex else { return .goOn }
            return .fail(
                Failure(
                    decided: .checksumMismatch(
                        algorithm: checksum.algorithm.rawValue, computed: computedHex, expected: checksum.expectedHex,
                        statedByServer: false)))
        case .stated(let stated):
            guard computedHex != stated.expectedHex else { return .goOn }
            return .fail(
                Failure(
                    decided: .checksumMismatch(
                        algorithm: stated.algorithm.rawValue, computed: computedHex, expected: stated.expectedHex,
                        statedByServer: true)))
        }
    }

    // MARK: - Before the first request: what the partial data is worth

    /// Takes what a resume record says of the resource. A directory destination keeps the URL given now as
    /// its identity: its working files are named after it.
    package mutating func adopt(_ info: MachineRecord) {
        // The identity stays the recorded original URL (a different URL for the same file is a refreshed
        // one, seed 002). Requests start from the URL given now and follow redirects again: a recorded
        // redirect target (often a signed CDN URL) may have expired since. Records hold URLs without
        // userinfo: the URL given now keeps its credentials when it names the recorded resource.
        if case .file = settings.destination, let recorded = info.originalURL,
            recorded.absoluteString != originalURL.withoutUserinfo.absoluteString
        {
            originalURL = recorded
        }
        resource.entityTagText = info.entityTag
        resource.entityTag = info.entityTag.flatMap { try? EntityTag(parsing: $0) }
        resource.lastModified = info.lastModified
        resource.totalLength = info.totalLength
        resource.acceptsRanges = info.acceptsRanges
        if case .directory = settings.destination, let name = info.fileName {
            resource.fileName = name
        }
    }

    /// Requests go to `url` instead of the original (seed 002's refreshed URL for existing partial data).
    package mutating func replaceURL(_ url: HTTPURL) {
        currentURL = url
        visited = [url.absoluteString]
    }

    /// Decides how much of a partial file of `fileLength` bytes to keep, given its resume record (if one
    /// was readable) and whether the machine has not rebooted since the record was written. Answers what
    /// the executor does to the partial (``PartialPlan``): the bytes kept, whether to truncate to them, the
    /// prefix to hash for the request's checksum and the durable offset the checkpoints start from.
    ///
    /// - A segment map is trusted as checkpointed (segments end anywhere, so the length proves nothing),
    ///   cut back to what the file holds; the file is not truncated, nor hashed (segments finish out of
    ///   order: the file is hashed whole at the end).
    /// - Same boot: the page cache survived a process crash, so every byte in the file is real. After a
    ///   reboot only what the last checkpoint synced is.
    /// - Bytes nothing can prove (no record, a corrupt or foreign one, a server that named no strong ETag
    ///   and no Last-Modified) are never resumed with a bare `Range`: that could splice two versions
    ///   (issue #13, defect 3; docs/ENGINE.md, "Resume rules"). The download starts over.
    package mutating func partialData(fileLength: Int64, record: MachineRecord?, sameBoot: Bool) -> PartialPlan {
        if let record, !record.segments.isEmpty {
            resource.savedSegments = record.segments.map { segment in
                var segment = segment
                segment.written = max(0, min(segment.written, fileLength - segment.start))
                return segment
            }
            resource.offset = SegmentPlan.contiguousPrefix(resource.savedSegments)
            resource.resumedFrom = resource.savedSegments.reduce(0) { $0 + $1.written }
            return PartialPlan(keep: fileLength, truncates: false, hashPrefix: nil, durableOffset: nil)
        }
        if let record {
            resource.offset = sameBoot ? fileLength : min(fileLength, record.bytesReceived)
        } else {
            resource.offset = fileLength
            if fileLength > 0 { recordChanges() }
        }
        if let total = resource.totalLength, resource.offset > total {
            resource.offset = 0
            restartPending = .partialLongerThanResource
        } else if resource.offset > 0, resource.ifRangeValue == nil {
            restartPending = .unusablePartialData
        }
        resource.resumedFrom = resource.offset
        return PartialPlan(
            keep: resource.offset, truncates: resource.offset != fileLength,
            hashPrefix: settings.checksum == nil ? nil : resource.offset,
            durableOffset: record.map { min(resource.offset, $0.bytesReceived) })
    }

    // MARK: - The existing destination and the partial's shape

    /// What to do about a destination that is there before the run: the answer to
    /// ``existingDestination(_:policy:)``.
    package enum DestinationAction: Sendable, Hashable {
        /// Download as if there were no file: prepare the partial (``partialData(fileLength:record:sameBoot:)``)
        /// and ``start()``.
        case download
        /// Keep the file and end the run with it: no request, no working file created, no partial locked.
        case keep
        /// Prepare and ``start()`` as for ``download``: the requests carry `conditions`
        /// (``ExistingFileRule/Found/conditions``) until the resource itself answers. A `304` then answers
        /// ``Action/keepExisting``; a `200` (or a probe's `206`) is the new version, taken as any first answer is.
        case askFirst(conditions: DKHTTPHeaders)
    }

    /// The executor looked at a file destination before the run, as `policy` asks
    /// (``ExistingFileRule/looks(_:)``): `found` is what is there — nil for nothing, a directory destination,
    /// or a policy that does not look. Reported once, before ``partialData(fileLength:record:sameBoot:)``;
    /// the verdict is ``ExistingFileRule``'s, the conditions are the file's (``ExistingFileRule/Found/conditions``).
    package mutating func existingDestination(
        _ found: ExistingFileRule.Found?, policy: ExistingFileRule.Policy
    ) -> DestinationAction {
        guard let found else { return .download }
        switch ExistingFileRule.verdict(policy, found.facts) {
        case .download:
            return .download
        case .keep:
            state = .finishing
            return .keep
        case .askFirst:
            conditions = found.conditions
            return .askFirst(conditions: found.conditions)
        }
    }

    /// What the executor does to the partial before the first request: the answer to
    /// ``partialData(fileLength:record:sameBoot:)``.
    package struct PartialPlan: Sendable, Hashable {
        /// The bytes of the file kept: from byte 0 on one connection; the whole file with a segment map.
        package var keep: Int64
        /// Truncate the file to ``keep`` first (it holds bytes nothing proves).
        package var truncates: Bool
        /// Hash the file's first `hashPrefix` bytes into the request's checksum before the first request;
        /// nil: hash nothing now (no checksum, or a segment map: segments finish out of order and the file is
        /// hashed whole at the end).
        package var hashPrefix: Int64?
        /// The bytes known synced, where the checkpoints start from: what the record says was checkpointed,
        /// at most ``keep``. Nil when nothing is known durable (no record) or a segment map says it.
        package var durableOffset: Int64?
    }

    // MARK: - Events

    /// The download begins (or continues) its requests.
    /// The first request (or the first after ``partialData(fileLength:record:sameBoot:)``): the request for the
    /// resource, a range for the rest of a partial, or a one-byte probe for a segmented download.
    package mutating func start() -> Decision<Action> {
        announce(resource.offset > 0 ? .resume(offset: resource.offset) : .start)
        return decided(nextRequest())
    }

    /// A response head arrived for the request last sent. `suggestedFileName` is the name the response
    /// suggests, already sanitised (its `Content-Disposition` file name, else the last segment of the URL the
    /// request went to; nil when neither gives one): a directory download named from the response takes it
    /// (``resolveFileName(_:)`` decides whether and when). `wallClock` (seconds since 1970) dates a
    /// `Retry-After` given as an HTTP-date.
    package mutating func responseHead(_ head: ResponseHead, suggestedFileName: String?, wallClock: Int64) -> Decision<HeadAction> {
        // Decided first: the piece table is checked against the length this head taught.
        let action = decideResponseHead(head, suggestedFileName: suggestedFileName, wallClock: wallClock)
        return decided(pieceTableChecked(action))
    }

    /// A body about to be written on one connection whose length is known must be one the piece table
    /// describes: a table for another length fails before a byte is written.
    private func pieceTableChecked(_ action: HeadAction) -> HeadAction {
        guard case .write = action, let total = resource.totalLength, let failure = pieceTableFailure(total: total)
        else { return action }
        return .abandon(failure)
    }

    /// Why the request's piece table cannot describe `total` bytes; nil when it can or there is none.
    private func pieceTableFailure(total: Int64) -> Failure? {
        guard let table = settings.pieceChecksums else { return nil }
        return MachineFailure.pieceTable(digests: table.digests.count, pieceLength: table.pieceLength, total: total)
            .map { Failure(decided: $0) }
    }

    private mutating func decideResponseHead(_ head: ResponseHead, suggestedFileName: String?, wallClock: Int64) -> HeadAction {
        guard case .awaitingHead(let exchange) = state else {
            return .abandon(Failure(decided: .internalError("a response head arrived with no request out")))
        }
        if exchange.conditional {
            if head.status == 304 {
                state = .draining(exchange, .notModified)
                return .discard
            }
            // Redirects keep asking (the conditions are about the resource, wherever it is).
            if !(300...399).contains(head.status) { conditions = nil }
        }
        if exchange.probing, let decided = probeAnswer(head, exchange, suggestedFileName: suggestedFileName) { return decided }
        switch head.status {
        case 301, 302, 303, 307, 308:
            return redirectAnswer(head, exchange)
        case 206, 416:
            return rangeAnswer(head, exchange, suggestedFileName: suggestedFileName)
        case 200 where exchange.requestedOffset > 0:
            return rangeAnswer(head, exchange, suggestedFileName: suggestedFileName)
        case 200:
            return acceptWholeBody(head, exchange, restart: nil, suggestedFileName: suggestedFileName)
        default:
            let status = head.status
            if URLExpiry.statuses.contains(status), settings.hasURLProvider {
                state = .draining(exchange, .refreshURL(status: status))
                return .discard
            }
            if TransientStatus.statuses.contains(status), let text = head.headers.first(name: "Retry-After"),
                let parsed = try? RetryAfter(parsing: text)
            {
                pendingRetryAfter = Double(parsed.delay(fromSecondsSince1970: wallClock))
            }
            return .abandon(Failure(decided: .status(status, reason: head.reason, url: currentURL)))
        }
    }

    /// The executor reserved space and recorded the validators of an accepted response: body bytes flow.
    package mutating func bodyStarts() -> [Effect] {
        announce(.receive(resumedFrom: resource.offset))
        return takeEffects()
    }

    /// `count` more bytes of the body are in the partial at ``Resource/offset``.
    @inline(__always)
    package mutating func bodyWritten(_ count: Int) {
        resource.offset += Int64(count)
    }

    /// The exchange ended without an error: its body (if any was wanted) is written.
    package mutating func exchangeEnded(jitter: Double) -> Decision<Action> {
        decided(decideExchangeEnded(jitter: jitter))
    }

    private mutating func decideExchangeEnded(jitter: Double) -> Action {
        switch state {
        case .draining(_, let next):
            switch next {
            case .redirect(let target):
                redirects += 1
                if redirects > settings.maxRedirects {
                    return decideFailure(
                        Failure(decided: .tooManyRedirects(limit: settings.maxRedirects, from: originalURL)), stopRequested: false,
                        jitter: jitter)
                }
                if !visited.insert(target.absoluteString).inserted {
                    return decideFailure(Failure(decided: .redirectLoop(target)), stopRequested: false, jitter: jitter)
                }
                follow(redirectTo: target)
                return nextRequest()
            case .refreshURL(let status):
                return refreshURL(after: status, jitter: jitter)
            case .restart(let reason):
                return restart(reason, jitter: jitter)
            case .segmented(let total):
                state = .segmented(total: total)
                let sources = segmentSources
                return .runSegments(
                    SegmentRun(
                        total: total, reserve: reservation, saved: resource.savedSegments, prefix: resource.offset,
                        url: currentURL, headers: requestHeaders, ifRange: resource.ifRangeValue,
                        entityTag: resource.entityTag, lastModified: resource.lastModified, sources: sources.sources,
                        linkedMirrors: sources.linked))
            case .complete:
                state = .finishing
                return .finalize
            case .oneConnection:
                return nextRequest()
            case .notModified:
                state = .finishing
                return .keepExisting
            }
        case .receivingBody:
            if let total = resource.totalLength {
                if resource.offset > total {
                    return decideFailure(
                        Failure(decided: .tooManyBytes(received: resource.offset, total: total)), stopRequested: false,
                        jitter: jitter)
                }
                if resource.offset < total {
                    // A server may send less than the open-ended range asked for: ask for the rest — but an
                    // answer without a single byte is a failure (retried with backoff, bounded by `retries`),
                    // not a reason to ask again at once.
                    if resource.offset == attemptStart {
                        return decideFailure(
                            Failure(decided: .noBodyBytes(offset: resource.offset, total: total)), stopRequested: false,
                            jitter: jitter)
                    }
                    return nextRequest()
                }
            }
            state = .finishing
            return .finalize
        default:
            return .fail(Failure(decided: .internalError("an exchange ended in state \(state)")))
        }
    }

    /// The current step failed with `failure` (thrown by the exchange, an effect, or decided here).
    /// `stopRequested`: the caller paused or cancelled; nothing is retried.
    package mutating func failed(_ failure: Failure, stopRequested: Bool, jitter: Double) -> Decision<Action> {
        decided(decideFailure(failure, stopRequested: stopRequested, jitter: jitter))
    }

    private mutating func decideFailure(_ failure: Failure, stopRequested: Bool, jitter: Double) -> Action {
        if stopRequested || failure.isCancellation {
            state = .failed
            return .fail(failure)
        }
        let decision = retry.next(
            transient: failure.isTransient, progress: resource.offset - attemptStart, retryAfter: pendingRetryAfter,
            jitter: jitter)
        pendingRetryAfter = nil
        guard case .retry(let delay, let attempt) = decision else {
            state = .failed
            return .fail(failure)
        }
        state = .waitingToRetry
        announce(.retry(after: .seconds(delay), attempt: attempt, error: failure))
        return .retry(after: delay, attempt: attempt, error: failure)
    }

    /// A wait (``Action/retry(after:attempt:error:)`` or ``Action/backOff(seconds:)``) is over.
    package mutating func retryDelayElapsed() -> Decision<Action> {
        decided(decideRetryDelayElapsed())
    }

    private mutating func decideRetryDelayElapsed() -> Action {
        switch state {
        case .waitingToRetry:
            announce(.resume(offset: resource.offset))
            return nextRequest()
        case .backingOff(let reason):
            beginRestart(reason)
            return nextRequest(restart: reason)
        default:
            return .fail(Failure(decided: .internalError("a wait ended in state \(state)")))
        }
    }

    /// The URL provider answered (nil: it has no fresh URL).
    package mutating func urlProvided(_ fresh: String?, jitter: Double) -> Decision<Action> {
        decided(decideURLProvided(fresh, jitter: jitter))
    }

    private mutating func decideURLProvided(_ fresh: String?, jitter: Double) -> Action {
        guard case .waitingForURL(let status) = state else {
            return .fail(Failure(decided: .internalError("a URL arrived in state \(state)")))
        }
        guard let fresh else {
            return decideFailure(Failure(decided: .status(status, reason: "", url: currentURL)), stopRequested: false, jitter: jitter)
        }
        guard let url = try? HTTPURL(fresh) else {
            return decideFailure(
                Failure(decided: .invalidProvidedURL(HTTPURL.redacting(fresh))), stopRequested: false, jitter: jitter)
        }
        currentURL = url
        redirects = 0
        visited = [url.absoluteString]
        recordChanges()
        announce(.refreshURL(to: url.listingDescription))
        return nextRequest()
    }

    /// The segment workers started from this map (the saved one, with any single-connection prefix).
    package mutating func segmentsStarted(_ map: [ResumeSegment]) {
        resource.savedSegments = map
    }

    /// The segment workers checkpointed this map (its bytes are synced).
    package mutating func segmentsCheckpointed(_ map: [ResumeSegment]) {
        resource.savedSegments = map
        resource.offset = SegmentPlan.contiguousPrefix(map)
    }

    /// The segment workers found `bytes` written beyond the saved map (the progress journal).
    package mutating func segmentsRecovered(_ bytes: Int64) {
        resource.resumedFrom += bytes
    }

    /// The segment workers stopped with `outcome`; `map` is their final segment map when complete.
    package mutating func segmentsEnded(_ outcome: SegmentRunOutcome, map: [ResumeSegment], jitter: Double) -> Decision<Action> {
        decided(decideSegmentsEnded(outcome, map: map, jitter: jitter))
    }

    private mutating func decideSegmentsEnded(_ outcome: SegmentRunOutcome, map: [ResumeSegment], jitter: Double) -> Action {
        guard case .segmented(let total) = state else {
            return .fail(Failure(decided: .internalError("segments ended in state \(state)")))
        }
        switch outcome {
        case .complete:
            resource.savedSegments = map
            resource.offset = total
            state = .finishing
            return .finalize
        case .restart(let reason):
            return restart(reason, jitter: jitter)
        case .refreshURL(let status):
            return refreshURL(after: status, jitter: jitter)
        }
    }

    /// A restart decided from a response: at once the first time, then after a backoff, and never more
    /// than ``RestartPolicy/limit`` times in one run.
    private mutating func restart(_ reason: RestartReason, jitter: Double) -> Action {
        guard let delay = restarts.next(base: settings.retryBaseDelay, maximum: settings.maxRetryDelay, jitter: jitter) else {
            return decideFailure(restartsExhausted(reason), stopRequested: false, jitter: jitter)
        }
        guard delay > 0 else {
            beginRestart(reason)
            return nextRequest(restart: reason)
        }
        state = .backingOff(reason)
        return .backOff(seconds: delay)
    }

    private func restartsExhausted(_ reason: RestartReason) -> Failure {
        Failure(decided: .restartsExhausted(count: restarts.count + 1, last: reason))
    }

    // MARK: - Stopping

    /// The run stopped (`stop`): what to do with its working files (``StopPolicy``), from what is known of
    /// the partial. `holdsLock`: the executor has the partial open and locked; `hasWorkingFile`: the
    /// download has a partial path.
    package mutating func stopped(_ stop: StopPolicy.Stop, holdsLock: Bool, hasWorkingFile: Bool) -> StopPolicy.Disposal {
        StopPolicy.disposal(
            for: stop, holdsLock: holdsLock,
            received: resource.offset > 0 || resource.savedSegments.contains { $0.written > 0 },
            segmented: !resource.savedSegments.isEmpty, hasWorkingFile: hasWorkingFile)
    }

    // MARK: - Requests

    /// Whether the next request is a range probe for a segmented transfer.
    private var wantsSegments: Bool {
        !singleConnectionOnly && (settings.connections > 1 || settings.sourceCount > 1 || settings.hasPieceChecksums
            || !resource.savedSegments.isEmpty)
    }

    private mutating func nextRequest(restart: RestartReason? = nil) -> Action {
        var restart = restart
        if let reason = restartPending {
            beginRestart(reason)
            restart = reason
        }
        attemptStart = resource.offset
        let probing = wantsSegments
        var headers = requestHeaders
        if probing {
            // A one-byte probe learns the length, the validators and whether ranges work, without
            // committing to a body stream (the byte is drained and the connection reused). With partial
            // data, If-Range turns a changed resource into a 200 instead of a 206.
            let holdsBytes = resource.offset > 0 || !resource.savedSegments.isEmpty
            headers = RangeRequest.headers(
                headers, asking: .closed(first: 0, last: 0), ifRange: holdsBytes ? resource.ifRangeValue : nil)
        } else if resource.offset > 0 {
            headers = RangeRequest.headers(headers, asking: .from(resource.offset), ifRange: resource.ifRangeValue)
        }
        // Conditions only on a request for the whole resource from scratch.
        let conditional = conditions != nil && resource.offset == 0 && resource.savedSegments.isEmpty
        if conditional, let conditions {
            for field in conditions { headers.replaceOrAdd(name: field.name, value: field.value) }
        }
        state = .awaitingHead(Exchange(requestedOffset: resource.offset, probing: probing, conditional: conditional))
        return .send(MachineRequest(url: currentURL, headers: headers), restart: restart)
    }

    /// Forgets the partial data and what the old version's responses taught.
    private mutating func beginRestart(_ reason: RestartReason) {
        resource.offset = 0
        resource.resumedFrom = 0
        resource.entityTag = nil
        resource.entityTagText = nil
        resource.lastModified = nil
        resource.totalLength = nil
        resource.savedSegments = []
        restartPending = nil
        recordChanges()
        announce(.restart(reason))
    }

    private mutating func follow(redirectTo target: HTTPURL) {
        // Credentials never cross to another origin (scheme, host, port), and never come from a redirect.
        if target.origin != currentURL.origin {
            requestHeaders = Self.withoutCredentials(requestHeaders, credentialHeaderNames: settings.credentialHeaderNames)
        }
        currentURL = target
        recordChanges()
        announce(.redirect(to: target.listingDescription))
    }

    /// `headers` less the fields that carry credentials: they never go to another origin (a redirect's
    /// target, a mirror, docs/MIRRORS.md).
    package static func withoutCredentials(_ headers: DKHTTPHeaders, credentialHeaderNames: [String]) -> DKHTTPHeaders {
        var headers = headers
        for name in ["Authorization", "Cookie", "Proxy-Authorization"] + credentialHeaderNames { headers.remove(name: name) }
        return headers
    }

    /// The sources of a segmented run (``SegmentRun/sources``): where requests go now, then each of the
    /// request's mirrors — with the request's credential fields only when it shares the original URL's
    /// origin — then the accepted response's `Link: rel=duplicate` targets (``RFC6249/mirrors(in:first:known:limit:)``,
    /// at most ``Settings/maxLinkMirrors``, none already known), never with credentials. Empty without a mirror.
    private var segmentSources: (sources: [MachineRequest], linked: Int) {
        let linked = acceptedHead.map { head in
            RFC6249.mirrors(
                in: head.headers, first: currentURL, known: settings.mirrors + [originalURL], limit: settings.maxLinkMirrors)
        } ?? []
        guard !settings.mirrors.isEmpty || !linked.isEmpty else { return ([], 0) }
        let credentialFree = Self.withoutCredentials(settings.headers, credentialHeaderNames: settings.credentialHeaderNames)
        let mirrors = settings.mirrors.map { mirror in
            MachineRequest(url: mirror, headers: mirror.origin == originalURL.origin ? settings.headers : credentialFree)
        }
        let first = MachineRequest(url: currentURL, headers: requestHeaders)
        return ([first] + mirrors + linked.map { MachineRequest(url: $0, headers: credentialFree) }, linked.count)
    }

    /// After 401/403/404/410: ask the URL provider, within its bound.
    private mutating func refreshURL(after status: Int, jitter: Double) -> Action {
        guard settings.hasURLProvider, refreshes < settings.maxURLRefreshes else {
            return decideFailure(Failure(decided: .status(status, reason: "", url: currentURL)), stopRequested: false, jitter: jitter)
        }
        refreshes += 1
        state = .waitingForURL(status: status)
        return .askForURL(
            URLRefreshContext(
                originalURL: originalURL.absoluteString, currentURL: currentURL.absoluteString, status: status,
                bytesReceived: resource.offset))
    }

    private mutating func settleOnOneConnection(_ reason: String) {
        singleConnectionOnly = true
        if settings.connections > 1 || settings.sourceCount > 1 { announce(.stayOnOneConnection(reason)) }
    }

    // MARK: - Answers

    private mutating func redirectAnswer(_ head: ResponseHead, _ exchange: Exchange) -> HeadAction {
        let status = head.status
        guard let location = head.headers.first(name: "Location") else {
            return .abandon(Failure(decided: .redirectWithoutLocation(status: status, from: currentURL)))
        }
        let target: HTTPURL
        do {
            target = try currentURL.resolving(location).withoutUserinfo
        } catch {
            return .abandon(
                Failure(decided: .unusableRedirect(status: status, location: HTTPURL.redacting(location), detail: error.detail)))
        }
        if currentURL.scheme == .https && target.scheme == .http && !settings.allowsInsecureRedirects {
            return .abandon(Failure(decided: .redirectToHTTP(status: status, target: target)))
        }
        state = .draining(exchange, .redirect(target))
        return .discard
    }

    /// The answer to a range request, decided by ``RangeResponsePolicy``.
    private mutating func rangeAnswer(_ head: ResponseHead, _ exchange: Exchange, suggestedFileName: String?) -> HeadAction {
        let status = head.status
        let policy = RangeResponsePolicy(
            first: exchange.requestedOffset, knownEntityTag: resource.entityTag, knownLastModified: resource.lastModified,
            knownTotal: resource.totalLength)
        switch policy.decide(head) {
        case .write(_, let last, let total):
            if let total { resource.totalLength = total }
            resource.acceptsRanges = true
            learnResumable(true)
            recordValidators(head)
            var receiving = exchange
            receiving.rangeEnd = last
            state = .receivingBody(receiving)
            return .write(bodyWrite(restart: nil))
        case .wholeBody(let reason):
            // Start over from zero in this same response (no wait: the body is already coming).
            guard restarts.next(base: 0, maximum: 0, jitter: 0) != nil else { return .abandon(restartsExhausted(reason)) }
            beginRestart(reason)
            return acceptWholeBody(head, exchange, restart: reason, suggestedFileName: suggestedFileName)
        case .complete(let total):
            resource.totalLength = total
            acceptedHead = head
            state = .draining(exchange, .complete)
            return .discard
        case .restart(let reason):
            state = .draining(exchange, .restart(reason))
            return .discard
        case .retry(let detail):
            return .abandon(Failure(decided: .rangeMismatch(status: status, detail: detail)))
        case .other:
            return .abandon(Failure(decided: .status(status, reason: head.reason, url: currentURL)))
        }
    }

    /// A 200: the body is the whole resource, written from byte 0.
    private mutating func acceptWholeBody(
        _ head: ResponseHead, _ exchange: Exchange, restart: RestartReason?, suggestedFileName: String?
    ) -> HeadAction {
        // An invalid or conflicting Content-Length says nothing of the length (the parser refuses to frame such a body).
        resource.totalLength = try? head.contentLength()
        let ranges = head.headers.first(name: "Accept-Ranges").flatMap { try? AcceptRanges(parsing: $0) }
        resource.acceptsRanges = ranges?.acceptsBytes ?? false
        recordValidators(head)
        let resumable = resource.acceptsRanges == true || resource.entityTag != nil || resource.lastModified != nil
        learnResumable(resumable)
        if !resumable { announce(.notResumable) }
        resolveFileName(suggestedFileName)
        var receiving = exchange
        receiving.rangeEnd = nil
        state = .receivingBody(receiving)
        return .write(bodyWrite(restart: restart))
    }

    /// How the body of the response just accepted is written, from what it taught (call once the state is
    /// ``State/receivingBody(_:)``).
    private func bodyWrite(restart: RestartReason?) -> BodyWrite {
        let offset = resource.offset
        let remaining = resource.totalLength.map { $0 - offset }
        let gathers = remaining.map { settings.smallBodies?.gathers(remaining: $0, at: offset) == true } ?? false
        return BodyWrite(
            restart: restart, offset: offset, reserve: reservation, hashesMD5: statedContentMD5 != nil,
            gather: gathers ? remaining : nil)
    }

    /// The space the bytes still to come need, from the length known and the bytes present.
    private var reservation: SpaceReservation? {
        SpaceReservation.forRemaining(of: resource.totalLength, from: resource.offset, preallocation: settings.preallocates)
    }

    /// The answer to a `Range: bytes=0-0` probe; nil when the ordinary rules apply (redirects, errors,
    /// and a 200, which is written as the whole file on one connection).
    private mutating func probeAnswer(_ head: ResponseHead, _ exchange: Exchange, suggestedFileName: String?) -> HeadAction? {
        switch head.status {
        case 206:
            let policy = RangeResponsePolicy(
                first: 0, knownEntityTag: resource.entityTag, knownLastModified: resource.lastModified,
                knownTotal: resource.totalLength)
            let complete: Int64
            switch policy.decide(head) {
            case .write(_, _, let total?):
                complete = total
            case .write(_, _, nil):
                settleOnOneConnection("the server did not report the file's length")
                state = .draining(exchange, .oneConnection)
                return .discard
            case .restart(let reason):
                state = .draining(exchange, .restart(reason))
                return .discard
            case .retry(let detail):
                return .abandon(Failure(decided: .rangeMismatch(status: 206, detail: "the range probe: \(detail)")))
            case .wholeBody, .complete, .other:
                return .abandon(
                    Failure(decided: .internalError("the range policy answered a 206 probe with something else than a range")))
            }
            resource.totalLength = complete
            resource.acceptsRanges = true
            learnResumable(true)
            recordValidators(head)
            resolveFileName(suggestedFileName)
            if let reason = SegmentRules.oneConnectionReason(entityTag: resource.entityTag, lastModified: resource.lastModified) {
                settleOnOneConnection(reason)
                state = .draining(exchange, .oneConnection)
                return .discard
            }
            let have = resource.savedSegments.isEmpty ? resource.offset : resource.savedSegments.reduce(0) { $0 + $1.written }
            if resource.savedSegments.isEmpty && complete - have < 2 * settings.minimumSegmentSize {
                settleOnOneConnection("the file is too small to split")
                state = .draining(exchange, .oneConnection)
                return .discard
            }
            state = .draining(exchange, .segmented(total: complete))
            return .discard
        case 200:
            let hadPartial = (resource.offset > 0 || !resource.savedSegments.isEmpty) && resource.ifRangeValue != nil
            let advertisesRanges = head.headers.first(name: "Accept-Ranges")
                .flatMap { try? AcceptRanges(parsing: $0) }?.acceptsBytes ?? false
            if hadPartial && advertisesRanges {
                // If-Range failed: the resource changed. Start over, and probe again.
                state = .draining(exchange, .restart(.validatorChanged))
                return .discard
            }
            settleOnOneConnection("the server answered the range probe with the whole file (no range support)")
            if !resource.savedSegments.isEmpty {
                // The map is useless on one connection: the whole body is written from byte 0.
                beginRestart(.rangeIgnored)
                return acceptWholeBody(
                    head, Exchange(requestedOffset: 0, probing: true), restart: .rangeIgnored, suggestedFileName: suggestedFileName)
            }
            return nil
        case 416:
            settleOnOneConnection("the file is empty")
            state = .draining(exchange, .oneConnection)
            return .discard
        default:
            return nil
        }
    }

    private mutating func recordValidators(_ head: ResponseHead) {
        acceptedHead = head
        if let text = head.headers.first(name: "ETag") {
            resource.entityTagText = text
            resource.entityTag = try? EntityTag(parsing: text)
        }
        if let modified = head.headers.first(name: "Last-Modified") { resource.lastModified = modified }
        recordChanges()
    }

    /// Names a directory download from the response it accepts (once): the name the response suggests
    /// (`suggestedFileName`, sanitised by the executor: Content-Disposition, else the URL's last segment),
    /// else the MD5 of the URL — or the caller's file id or MD5 rule (those two are the settings'
    /// ``Settings/ruleFileName``, made where the digest is computed).
    private mutating func resolveFileName(_ suggestedFileName: String?) {
        guard case .directory(_, let rule) = settings.destination, resource.fileName == nil else { return }
        switch rule {
        case .fileID, .md5OfURL:
            resource.fileName = settings.ruleFileName
        case .fromResponse:
            resource.fileName = suggestedFileName ?? settings.ruleFileName
        }
        recordChanges()
    }
}
