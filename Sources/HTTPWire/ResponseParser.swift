extension WireError.Code {
    /// More interim (1xx) responses than ``ParserLimits/maxInterimResponses`` before the final head.
    public static let tooManyInterimResponses = WireError.Code("tooManyInterimResponses")
    /// A response head is longer than ``ParserLimits/maxHeadBytes``.
    public static let headTooLarge = WireError.Code("headTooLarge")
    /// A response head has more field lines than ``ParserLimits/maxHeaderCount``.
    public static let tooManyHeaderFields = WireError.Code("tooManyHeaderFields")
    /// The connection closed before a complete response head arrived.
    public static let truncatedHead = WireError.Code("truncatedHead")
    /// The connection closed before all `Content-Length` body bytes arrived.
    public static let truncatedBody = WireError.Code("truncatedBody")
    /// The connection closed before the end of a chunked body (last chunk, trailers, final CRLF).
    public static let incompleteChunkedBody = WireError.Code("incompleteChunkedBody")
}

/// What one call to ``ResponseParser/next(_:)`` found.
public enum ParseEvent: Sendable, Hashable {
    /// All given bytes were consumed and there is nothing to report yet: read more input.
    case needMore
    /// The final (non-1xx) response head. Interim 1xx heads are skipped; 101 is an error.
    case head(ResponseHead)
    /// Payload bytes at these offsets within the buffer passed to this call, chunk framing removed.
    case body(Range<Int>)
    /// The message is complete.
    case end
}

/// One event and how many input bytes produced it.
public struct ParseStep: Sendable, Hashable {
    /// What was found.
    public var event: ParseEvent
    /// How many bytes of the input were consumed; the caller continues after them.
    public var consumed: Int

    /// Creates a step.
    public init(event: ParseEvent, consumed: Int) {
        self.event = event
        self.consumed = consumed
    }
}

/// An incremental, zero-copy parser for one HTTP/1.1 response at a time.
///
/// Feed it whatever bytes arrived, and act on one event per call:
///
/// ```swift
/// var parser = ResponseParser(requestMethod: .GET)
/// var offset = 0
/// loop: while true {
///     let step = try parser.next(UnsafeRawBufferPointer(rebasing: buffer[offset..<filled]))
///     let base = offset
///     offset += step.consumed
///     switch step.event {
///     case .head(let head): handle(head)
///     case .body(let range): write(buffer[(base + range.lowerBound)..<(base + range.upperBound)])
///     case .end: break loop
///     case .needMore: filled = refill(); offset = 0   // on EOF: try parser.finish()
///     }
/// }
/// ```
///
/// Keep calling ``next(_:)`` until it returns ``ParseEvent/needMore``, even with an empty buffer:
/// a message without body (or whose last body byte was just delivered) reports ``ParseEvent/end``
/// without needing more input.
///
/// Head bytes are copied into a buffer the parser owns (at most ``ParserLimits/maxHeadBytes``), so
/// consumed bytes may always be discarded. Body bytes are never copied: they come back as ranges into
/// the caller's buffer. After ``ParseEvent/end``, `consumed` stops at the end of the message; what
/// follows belongs to the next response (see ``isReusable`` and ``reset(requestMethod:)``).
///
/// After an error the parser stays failed and rethrows that error.
///
/// ## Strict framing: the decisions (issue #47, item 5)
///
/// Each leniency llhttp's strict mode rejects, decided against RFC 9112 and the request-smuggling
/// literature (a response is dangerous where two parsers disagree on where it ends: the next response
/// on a reused connection is then read from the wrong bytes). docs/NETWORKING.md repeats this table;
/// `StrictFramingTests` in Tests/HTTPWireTests checks every row with llhttp-style cases.
///
/// | Input | Decision | Why |
/// |---|---|---|
/// | Control byte (not HTAB) or DEL in a field value | reject, `invalidCharacterInHead` | RFC 9110 §5.5 allows only VCHAR, obs-text, SP, HTAB; a CR/LF/NUL MUST be rejected or replaced, and a value is never passed on (file names, logs) with control bytes |
/// | NUL, or CR not followed by LF, anywhere in a head | reject, `invalidCharacterInHead` | RFC 9112 §2.2 |
/// | `Content-Length` and `Transfer-Encoding: chunked` together | accept: chunked wins, the connection is closed after the response | RFC 9112 §6.3 item 3 (Transfer-Encoding overrides; "ought to be handled as an error"): the danger is the next response read on the same connection, which closing removes; real servers behind some CDNs send both |
/// | Bare LF ending a status or field line | accept | RFC 9112 §2.2 lets a recipient take LF as a line end; old and embedded servers send it, and curl and browsers accept it |
/// | Bare LF in chunked framing (size line, after data, trailers) | reject, `invalidChunkTerminator` | RFC 9112 §7.1 requires CRLF there; disagreement on chunk boundaries is the classic smuggling vector (Kallus et al., "chunk terminators", 2024) |
/// | Bytes after the end of a response with `Connection: close` | accept the response, ignore the bytes, close | they are never parsed as another response (no desync); the finished response is intact |
/// | Whitespace after a chunk size with no `;` (`5 ␍␊`) | reject, `invalidChunkSize` | RFC 9112 §7.1.1 allows BWS only before `;` |
/// | Empty chunk extension (`5;␍␊`) or `=` without a value | reject, `invalidChunkExtension` | chunk-ext-name is a token (1 or more bytes) |
/// | Unbalanced quoted chunk-extension value (`5;a="b␍␊`) | reject, `invalidChunkExtension` | a quoted-string must end before CRLF; parsers that skip extensions to the next CRLF and those that honour quotes disagree |
/// | Up to ``maxEmptyLinesBeforeStatusLine`` empty lines before a status line (after `100 Continue`) | skip them | RFC 9112 §2.2 says a server MUST NOT send them, but llhttp and browsers skip them and aiohttp sent one; a bound keeps a stream of newlines from holding the parser |
public struct ResponseParser: Sendable {
    /// Empty lines (CRLF or LF) skipped before a status line; one more is a ``WireError/Code/malformedStatusLine``.
    public static let maxEmptyLinesBeforeStatusLine = 4

    /// Where the parser is in the message; each case lists where it may go next.
    @usableFromInline
    enum State: Sendable {
        /// Reading a head (interim or final). → itself (after a 1xx), a body state, `.failed`.
        case head
        /// The final head was reported and no body follows. → `.complete`.
        case noBody
        /// Reading a `Content-Length` body with `remaining` bytes to go. → `.complete`, `.failed`.
        case fixedBody(remaining: Int64)
        /// Reading a chunked body. → `.complete`, `.failed`.
        case chunkedBody
        /// Reading a body that ends when the connection closes. → `.complete` (via `finish()`).
        case untilClose
        /// `.end` has been reported. Terminal until `reset`.
        case complete
        /// An error was thrown; it is thrown again on every call. Terminal until `reset`.
        case failed(WireError)
    }

    /// The limits this parser enforces.
    public let limits: ParserLimits
    private var requestMethod: DKHTTPMethod
    @usableFromInline private(set) var state: State = .head
    private var chunked = ChunkedDecoder()

    /// Head bytes received so far when a head spans several calls.
    private var headBuffer: [UInt8] = []
    /// The head scanner is at the start of a line (so an LF here ends the head).
    private var scanAtLineStart = false
    /// The previous head byte was CR.
    private var scanSawCR = false
    /// The current line has a byte other than CR (an LF ends a non-empty line).
    private var scanLineHasContent = false
    /// Empty lines skipped before the current head's status line.
    private var emptyLinesBeforeStatusLine = 0
    /// Completed lines of the current head (status line included).
    private var scanLines = 0
    /// Offset within the message where the current head starts (after any interim heads).
    private var headStart = 0
    /// Interim (1xx) heads skipped in the current message.
    private var interimResponses = 0

    @usableFromInline private(set) var allowsPersistence = false
    @usableFromInline private(set) var faultyFraming = false

    /// How the body of the current response is delimited; set when ``ParseEvent/head(_:)`` is reported.
    public private(set) var framing: BodyFraming?
    /// Payload bytes delivered in ``ParseEvent/body(_:)`` events so far (chunk framing excluded).
    public private(set) var bodyBytesReceived: Int64 = 0
    /// Bytes of the current response consumed so far: interim heads, head, framing and body.
    public private(set) var messageBytesConsumed = 0

    /// Creates a parser for the response to a request with `requestMethod`.
    /// - Parameters:
    ///   - requestMethod: The method of the request this response answers; HEAD responses have no body.
    ///   - limits: Bounds on heads, chunk lines and trailers.
    public init(requestMethod: DKHTTPMethod, limits: ParserLimits = .default) {
        self.requestMethod = requestMethod
        self.limits = limits
    }

    // The questions below (`isComplete` to `remainingFixedBodyBytes`) are `@inlinable`: asked from another
    // module, each call site got its own copy of the whole parser on the caller's stack, and the client's
    // exchange, which asks them at many sites, is under every body byte of a transfer thread
    // (docs/BENCHMARKS.md, "Stacks at 1,024 transfers").
    /// Whether every byte of the message has been consumed: ``ParseEvent/end`` has been reported, or
    /// the next call reports it without needing input. A close-delimited body completes only in ``finish()``.
    @inlinable
    public var isComplete: Bool {
        switch state {
        case .complete, .noBody, .fixedBody(remaining: 0): return true
        case .head, .fixedBody, .chunkedBody, .untilClose, .failed: return false
        }
    }

    /// Whether the connection may carry another request once this message is complete (RFC 9112 §9.3):
    /// the message is complete and delimited (not close-delimited), the server did not say
    /// `Connection: close` (HTTP/1.1) or did say `Connection: keep-alive` (HTTP/1.0), and the framing
    /// was not faulty (`Transfer-Encoding` together with `Content-Length`, or in HTTP/1.0).
    @inlinable
    public var isReusable: Bool {
        isComplete && headAllowsReuse
    }

    /// Whether the final head read so far lets the connection carry another request after this message:
    /// ``isReusable`` without the wait for the message's end. Known once ``ParseEvent/head(_:)`` has been
    /// reported, so a client knows before the body whether a request sent ahead would be answered or
    /// closed on (a server that announced `Connection: close` may reset a connection that still holds
    /// unread requests, losing the rest of this response).
    @inlinable
    public var headAllowsReuse: Bool {
        guard let framing, allowsPersistence, !faultyFraming else { return false }
        return framing != .untilClose
    }

    /// Body bytes still expected in a `Content-Length` body, or nil when no such body is in progress.
    /// A caller may move up to this many bytes past the parser (``consumeBodyOutOfBand(_:)``).
    @inlinable
    public var remainingFixedBodyBytes: Int64? {
        if case .fixedBody(let remaining) = state { return remaining }
        return nil
    }

    /// Accounts for `count` bytes of a `Content-Length` body that the caller moved without passing them
    /// through ``next(_:)`` — for example with `splice(2)` straight from the socket into a file.
    /// - Throws: ``WireError/Code/invalidOutOfBandBody`` when no `Content-Length` body is in progress
    ///   or `count` is negative or exceeds ``remainingFixedBodyBytes``; the parser then stays failed.
    public mutating func consumeBodyOutOfBand(_ count: Int64) throws(WireError) {
        // Written without `guard case … else { throw }`: Swift 6.3.1's optimiser crashes ("Found
        // ownership error") on that shape in a typed-throws mutating method.
        var remaining: Int64 = -1
        if case .fixedBody(let left) = state { remaining = left }
        if remaining >= 0 && count >= 0 && count <= remaining {
            state = .fixedBody(remaining: remaining - count)
            bodyBytesReceived += count
            messageBytesConsumed += Int(count)
            return
        }
        let expected = remaining >= 0 ? "\(remaining)" : "no"
        let error = WireError(
            .invalidOutOfBandBody, offset: messageBytesConsumed,
            "\(count) body bytes moved out of band, but \(expected) Content-Length bytes remain")
        state = .failed(error)
        throw error
    }

    /// Prepares for the next response on a kept-alive connection, keeping the head buffer's storage.
    /// - Parameter requestMethod: The method of the next request.
    public mutating func reset(requestMethod: DKHTTPMethod) {
        self.requestMethod = requestMethod
        state = .head
        chunked = ChunkedDecoder()
        headBuffer.removeAll(keepingCapacity: true)
        scanAtLineStart = false
        scanSawCR = false
        scanLineHasContent = false
        emptyLinesBeforeStatusLine = 0
        scanLines = 0
        headStart = 0
        interimResponses = 0
        allowsPersistence = false
        faultyFraming = false
        framing = nil
        bodyBytesReceived = 0
        messageBytesConsumed = 0
    }

    /// Parses from `bytes` until one event.
    ///
    /// When `bytes` is not empty, at least one byte is consumed unless the event is ``ParseEvent/end``.
    /// With empty `bytes` the call still reports ``ParseEvent/end`` when the message is complete.
    /// - Parameter bytes: Received bytes, starting right after those consumed by the previous call.
    /// - Returns: The event and the number of bytes consumed.
    /// - Throws: ``WireError`` for malformed or oversized input; the parser then stays failed.
    public mutating func next(_ bytes: UnsafeRawBufferPointer) throws(WireError) -> ParseStep {
        do throws(WireError) {
            let step = try advance(bytes)
            messageBytesConsumed += step.consumed
            return step
        } catch {
            state = .failed(error)
            throw error
        }
    }

    /// Call when the peer closed the connection (EOF).
    /// - Returns: ``ParseEvent/end`` if the message is complete or close-delimited.
    /// - Throws: ``WireError/Code/truncatedHead``, ``WireError/Code/truncatedBody`` or
    ///   ``WireError/Code/incompleteChunkedBody``, with what was expected and received in the detail.
    public mutating func finish() throws(WireError) -> ParseEvent {
        let error: WireError
        switch state {
        case .failed(let failure):
            throw failure
        case .complete, .noBody, .untilClose, .fixedBody(remaining: 0):
            // RFC 9112 §6.3 item 8: a close-delimited body ends when the connection closes.
            state = .complete
            return .end
        case .head:
            error = WireError(
                .truncatedHead, offset: messageBytesConsumed,
                "connection closed after \(messageBytesConsumed) bytes; expected a complete response head")
        case .fixedBody(let remaining):
            let expected = bodyBytesReceived + remaining
            error = WireError(
                .truncatedBody, offset: messageBytesConsumed,
                "connection closed after \(bodyBytesReceived) of \(expected) body bytes (Content-Length)")
        case .chunkedBody:
            error = WireError(
                .incompleteChunkedBody, offset: messageBytesConsumed,
                "connection closed after \(bodyBytesReceived) payload bytes, \(chunked.positionDescription)")
        }
        state = .failed(error)
        throw error
    }

    // MARK: - Implementation

    private mutating func advance(_ bytes: UnsafeRawBufferPointer) throws(WireError) -> ParseStep {
        switch state {
        case .failed(let error):
            throw error
        case .complete:
            return ParseStep(event: .end, consumed: 0)
        case .noBody, .fixedBody(remaining: 0):
            state = .complete
            return ParseStep(event: .end, consumed: 0)
        case .head:
            return try parseHead(bytes)
        case .fixedBody(let remaining):
            guard !bytes.isEmpty else { return ParseStep(event: .needMore, consumed: 0) }
            let count = Int(min(Int64(bytes.count), remaining))
            state = .fixedBody(remaining: remaining - Int64(count))
            bodyBytesReceived += Int64(count)
            return ParseStep(event: .body(0..<count), consumed: count)
        case .untilClose:
            guard !bytes.isEmpty else { return ParseStep(event: .needMore, consumed: 0) }
            bodyBytesReceived += Int64(bytes.count)
            return ParseStep(event: .body(0..<bytes.count), consumed: bytes.count)
        case .chunkedBody:
            let step = try chunked.decode(bytes, limits: limits, baseOffset: messageBytesConsumed)
            switch step.event {
            case .body(let range): bodyBytesReceived += Int64(range.count)
            case .end: state = .complete
            case .needMore, .head: break
            }
            return step
        }
    }

    /// Where a scan for the head's end that starts at `start` of `count` bytes must stop: the head takes at
    /// most `maxHeadBytes` from where it starts, counting what `headBuffer` already holds of it.
    private func headScanEnd(from start: Int, in count: Int) -> Int {
        start + max(0, min(count - start, limits.maxHeadBytes - headBuffer.count))
    }

    /// Scans head bytes for the empty line that ends the head, copying them into `headBuffer` when
    /// the head spans calls, and parses each complete head. Interim heads are skipped in place.
    private mutating func parseHead(_ bytes: UnsafeRawBufferPointer) throws(WireError) -> ParseStep {
        var index = 0
        while index < bytes.count {
            var scanStart = index
            // Recomputed below when empty lines before the status line move the head's start (else a head fed
            // all at once was cut short by the bytes of the skipped lines, and refused where the same bytes fed
            // one by one were not).
            var scanEnd = headScanEnd(from: scanStart, in: bytes.count)
            var headEnd: Int?
            while index < scanEnd {
                let byte = bytes[index]
                let offset = messageBytesConsumed + index
                index += 1
                // RFC 9112 §2.2: a bare CR (not followed by LF) is invalid and must not be treated
                // as a line terminator; NUL is rejected outright (RFC 9110 §5.5).
                if scanSawCR && byte != 0x0A {
                    throw WireError(
                        .invalidCharacterInHead, offset: offset - 1, "CR not followed by LF in response head")
                }
                switch byte {
                case 0x0A:
                    scanSawCR = false
                    if scanLines == 0 && !scanLineHasContent {
                        // An empty line before the status line: skipped, a few at most (decisions table).
                        emptyLinesBeforeStatusLine += 1
                        if emptyLinesBeforeStatusLine > Self.maxEmptyLinesBeforeStatusLine {
                            throw WireError(
                                .malformedStatusLine, offset: offset,
                                "more than \(Self.maxEmptyLinesBeforeStatusLine) empty lines before the status line")
                        }
                        headBuffer.removeAll(keepingCapacity: true)
                        scanStart = index
                        headStart = messageBytesConsumed + index
                        scanEnd = headScanEnd(from: scanStart, in: bytes.count)
                        continue
                    }
                    scanLineHasContent = false
                    if scanAtLineStart {
                        headEnd = index
                    } else {
                        scanAtLineStart = true
                        scanLines += 1
                        if scanLines - 1 > limits.maxHeaderCount {
                            throw WireError(
                                .tooManyHeaderFields, offset: offset,
                                "response head has more than maxHeaderCount (\(limits.maxHeaderCount)) fields")
                        }
                    }
                case 0x0D:
                    scanSawCR = true
                case 0x00:
                    throw WireError(.invalidCharacterInHead, offset: offset, "NUL byte in response head")
                default:
                    scanAtLineStart = false
                    scanLineHasContent = true
                }
                if headEnd != nil { break }
            }

            guard let headEnd else {
                if index < bytes.count {
                    throw WireError(
                        .headTooLarge, offset: headStart + limits.maxHeadBytes,
                        "response head is larger than maxHeadBytes (\(limits.maxHeadBytes))")
                }
                headBuffer.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[scanStart..<index]))
                return ParseStep(event: .needMore, consumed: index)
            }

            let head: ResponseHead
            if headBuffer.isEmpty {
                // The whole head is in the caller's bytes: parse it there without copying.
                head = try ResponseHead.parse(
                    UnsafeRawBufferPointer(rebasing: bytes[scanStart..<headEnd]), baseOffset: headStart)
            } else {
                headBuffer.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[scanStart..<headEnd]))
                // `Array.withUnsafeBytes` rethrows untyped errors, so carry the typed error out in a Result.
                let start = headStart
                head = try headBuffer.withUnsafeBytes { buffer in
                    Result { () throws(WireError) in try ResponseHead.parse(buffer, baseOffset: start) }
                }.get()
            }
            headBuffer.removeAll(keepingCapacity: true)
            scanAtLineStart = false
            scanLineHasContent = false
            emptyLinesBeforeStatusLine = 0
            scanLines = 0
            headStart = messageBytesConsumed + headEnd

            if head.status == 101 {
                throw WireError(
                    .upgradeUnsupported, offset: headStart,
                    "server switched protocols (101) although no upgrade was requested")
            }
            if head.isInformational {
                // RFC 9110 §15.2: a client MUST be able to parse and ignore 1xx responses that
                // precede the final response (100 Continue, 103 Early Hints, ...) — but not without end.
                interimResponses += 1
                if interimResponses > limits.maxInterimResponses {
                    throw WireError(
                        .tooManyInterimResponses, offset: headStart,
                        "more than \(limits.maxInterimResponses) interim (1xx) responses before the final one")
                }
                continue
            }
            try beginBody(after: head)
            return ParseStep(event: .head(head), consumed: headEnd)
        }
        return ParseStep(event: .needMore, consumed: index)
    }

    private mutating func beginBody(after head: ResponseHead) throws(WireError) {
        let (framing, faulty) = try head.bodyFraming(requestMethod: requestMethod)
        self.framing = framing
        faultyFraming = faulty
        allowsPersistence = head.allowsPersistentConnection
        switch framing {
        case .none: state = .noBody
        case .contentLength(let length): state = .fixedBody(remaining: length)
        case .chunked: state = .chunkedBody
        case .untilClose: state = .untilClose
        }
    }
}

extension WireError.Code {
    /// ``ResponseParser/consumeBodyOutOfBand(_:)`` was called without a `Content-Length` body in progress,
    /// or for more bytes than remain.
    public static let invalidOutOfBandBody = WireError.Code("invalidOutOfBandBody")
}
