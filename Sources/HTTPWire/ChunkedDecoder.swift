extension WireError.Code {
    /// A chunk-size line does not start with a hexadecimal size or has junk after it (RFC 9112 §7.1).
    public static let invalidChunkSize = WireError.Code("invalidChunkSize")
    /// A chunk size has more hexadecimal digits than ``ParserLimits/maxChunkSizeDigits``.
    public static let chunkSizeTooLong = WireError.Code("chunkSizeTooLong")
    /// A chunk size, or the sum of all chunk sizes, does not fit in 63 bits.
    public static let chunkSizeOverflow = WireError.Code("chunkSizeOverflow")
    /// A chunk-size line (size plus extensions) is longer than ``ParserLimits/maxChunkLineBytes``.
    public static let chunkLineTooLong = WireError.Code("chunkLineTooLong")
    /// A chunk line or chunk data is not ended by CRLF: a bare LF, a CR without LF, or missing bytes.
    public static let invalidChunkTerminator = WireError.Code("invalidChunkTerminator")
    /// A chunk-size line breaks the chunk-extension grammar (RFC 9112 §7.1.1): an empty extension, a name
    /// that is not a token, `=` without a value, an unterminated quoted string.
    public static let invalidChunkExtension = WireError.Code("invalidChunkExtension")
    /// The trailer section is longer than ``ParserLimits/maxTrailerBytes``.
    public static let trailerTooLarge = WireError.Code("trailerTooLarge")
}

/// Removes chunked transfer coding (RFC 9112 §7.1) from a body, yielding payload as offset ranges
/// into the caller's bytes and never copying or allocating.
///
/// ```
/// chunked-body   = *chunk last-chunk trailer-section CRLF
/// chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
/// last-chunk     = 1*("0") [ chunk-ext ] CRLF
/// ```
///
/// Unlike the head, chunk framing must use CRLF: a bare LF is an error, since parsers that disagree
/// on chunk boundaries are the classic response-smuggling vector. The trailer section is checked for
/// CRLF line endings and its size, then discarded.
struct ChunkedDecoder: Sendable, Hashable {
    /// Where the decoder is inside the chunked body; each case lists where it may go next.
    enum State: Sendable, Hashable {
        /// Reading hex digits of a chunk size. → `.sizeLineRest`.
        case size
        /// After the size digits: whitespace, `;` or CR. → `.sizeWhitespace`, `.extensionNameStart`, `.sizeLineLF`.
        case sizeLineRest
        /// Whitespace after the size: only more of it or `;` may follow (BWS before an extension, never
        /// before CRLF). → `.extensionNameStart`.
        case sizeWhitespace
        /// After `;`: whitespace, then the first byte of an extension name. → `.extensionName`.
        case extensionNameStart
        /// Inside an extension name. → `.extensionAfterName`, `.extensionValueStart`, `.extensionNameStart`, `.sizeLineLF`.
        case extensionName
        /// Whitespace after a name: `=`, `;` or CR may follow. → `.extensionValueStart`, `.extensionNameStart`, `.sizeLineLF`.
        case extensionAfterName
        /// After `=`: whitespace, then a token or a quoted string. → `.extensionToken`, `.extensionQuoted`.
        case extensionValueStart
        /// Inside a token value. → `.extensionAfterValue`, `.extensionNameStart`, `.sizeLineLF`.
        case extensionToken
        /// Inside a quoted-string value. → `.extensionQuotedEscape`, `.extensionAfterValue`.
        case extensionQuoted
        /// After a backslash in a quoted string. → `.extensionQuoted`.
        case extensionQuotedEscape
        /// After a value: whitespace, `;` or CR. → `.extensionNameStart`, `.sizeLineLF`.
        case extensionAfterValue
        /// Saw the CR ending a chunk-size line. → `.data` (size > 0), `.trailerLineStart` (size 0).
        case sizeLineLF
        /// Inside chunk data, `chunkRemaining` bytes to go. → `.dataCR`.
        case data
        /// Expecting the CR after chunk data. → `.dataLF`.
        case dataCR
        /// Expecting the LF after chunk data. → `.size`.
        case dataLF
        /// At the start of a trailer field line or the final empty line. → `.trailerLine`, `.finalLF`.
        case trailerLineStart
        /// Inside a trailer field line, skipping to CR. → `.trailerLineLF`.
        case trailerLine
        /// Saw the CR ending a trailer field line. → `.trailerLineStart`.
        case trailerLineLF
        /// Saw the CR of the empty line that ends the body. → `.done`.
        case finalLF
        /// The whole chunked body has been consumed. Terminal.
        case done
    }

    private(set) var state: State = .size
    /// The chunk size being read.
    private var chunkSize: Int64 = 0
    /// Hex digits read for the current chunk size, leading zeros included.
    private var sizeDigits = 0
    /// Bytes of the current chunk-size line so far, CRLF excluded.
    private var lineBytes = 0
    /// Payload bytes of the current chunk not yet delivered.
    private(set) var chunkRemaining: Int64 = 0
    /// Bytes of the trailer section so far.
    private var trailerBytes = 0
    /// Sum of all chunk sizes announced so far.
    private(set) var announcedBytes: Int64 = 0

    /// Decodes from `bytes` until one event: payload bytes, the end of the body, or the input runs out.
    /// - Parameters:
    ///   - bytes: Body bytes; offsets in the returned event index into them.
    ///   - limits: Size limits for chunk lines and trailers.
    ///   - baseOffset: Offset of `bytes[0]` within the whole message, for error offsets.
    /// - Returns: `.body(range)` with `consumed` through the range's end; `.end` with `consumed`
    ///   through the final LF; or `.needMore` with everything consumed.
    mutating func decode(
        _ bytes: UnsafeRawBufferPointer, limits: ParserLimits, baseOffset: Int
    ) throws(WireError) -> ParseStep {
        var index = 0
        while index < bytes.count {
            if state == .data {
                let count = Int(min(Int64(bytes.count - index), chunkRemaining))
                chunkRemaining -= Int64(count)
                if chunkRemaining == 0 { state = .dataCR }
                return ParseStep(event: .body(index..<(index + count)), consumed: index + count)
            }
            try step(bytes[index], limits: limits, offset: baseOffset + index)
            index += 1
            if state == .done { return ParseStep(event: .end, consumed: index) }
        }
        return ParseStep(event: .needMore, consumed: index)
    }

    /// Advances the framing state machine by one byte outside chunk data.
    private mutating func step(_ byte: UInt8, limits: ParserLimits, offset: Int) throws(WireError) {
        switch state {
        case .size:
            if let digit = Self.hexValue(byte) {
                sizeDigits += 1
                if sizeDigits > limits.maxChunkSizeDigits {
                    throw WireError(
                        .chunkSizeTooLong, offset: offset,
                        "chunk size has more than maxChunkSizeDigits (\(limits.maxChunkSizeDigits)) hex digits")
                }
                guard chunkSize <= Int64.max >> 4 else {
                    throw WireError(.chunkSizeOverflow, offset: offset, "chunk size does not fit in 63 bits")
                }
                chunkSize = chunkSize << 4 | Int64(digit)
                try countLineByte(limits: limits, offset: offset)
            } else if sizeDigits == 0 {
                throw WireError(
                    .invalidChunkSize, offset: offset,
                    "chunk-size line starts with byte 0x\(HTTPByteClass.hex(byte)), not a hex digit")
            } else {
                state = .sizeLineRest
                try step(byte, limits: limits, offset: offset)
            }
        case .sizeLineRest, .sizeWhitespace, .extensionNameStart, .extensionName, .extensionAfterName,
            .extensionValueStart, .extensionToken, .extensionQuoted, .extensionQuotedEscape, .extensionAfterValue:
            if byte == 0x0A { throw Self.bareLF(offset, "chunk-size line") }
            if byte == 0x0D {
                guard [.sizeLineRest, .extensionName, .extensionAfterName, .extensionToken, .extensionAfterValue]
                    .contains(state)
                else { throw Self.malformedLine(state, offset) }
                state = .sizeLineLF
                return
            }
            try countLineByte(limits: limits, offset: offset)
            try extensionStep(byte, offset: offset)
        case .sizeLineLF:
            guard byte == 0x0A else { throw Self.crWithoutLF(offset, "chunk-size line") }
            if chunkSize == 0 {
                state = .trailerLineStart
            } else {
                let (total, overflow) = announcedBytes.addingReportingOverflow(chunkSize)
                guard !overflow else {
                    throw WireError(.chunkSizeOverflow, offset: offset, "sum of chunk sizes does not fit in 63 bits")
                }
                announcedBytes = total
                chunkRemaining = chunkSize
                state = .data
            }
            chunkSize = 0
            sizeDigits = 0
            lineBytes = 0
        case .data:
            preconditionFailure("ChunkedDecoder.step called in state .data; data is handled by decode")
        case .dataCR:
            guard byte == 0x0D else {
                throw WireError(
                    .invalidChunkTerminator, offset: offset,
                    "chunk data is followed by byte 0x\(HTTPByteClass.hex(byte)) instead of CRLF (RFC 9112 §7.1)")
            }
            state = .dataLF
        case .dataLF:
            guard byte == 0x0A else { throw Self.crWithoutLF(offset, "chunk data") }
            state = .size
        case .trailerLineStart:
            try countTrailerByte(limits: limits, offset: offset)
            switch byte {
            case 0x0D: state = .finalLF
            case 0x0A: throw Self.bareLF(offset, "trailer section")
            default: state = .trailerLine
            }
        case .trailerLine:
            try countTrailerByte(limits: limits, offset: offset)
            switch byte {
            case 0x0D: state = .trailerLineLF
            case 0x0A: throw Self.bareLF(offset, "trailer field line")
            default: break
            }
        case .trailerLineLF:
            try countTrailerByte(limits: limits, offset: offset)
            guard byte == 0x0A else { throw Self.crWithoutLF(offset, "trailer field line") }
            state = .trailerLineStart
        case .finalLF:
            try countTrailerByte(limits: limits, offset: offset)
            guard byte == 0x0A else { throw Self.crWithoutLF(offset, "chunked body") }
            state = .done
        case .done:
            preconditionFailure("ChunkedDecoder.step called in state .done")
        }
    }

    /// One byte of a chunk-size line after the size, neither CR nor LF: the grammar of RFC 9112 §7.1.1,
    /// strictly (the decisions table in ResponseParser.swift). Extensions are checked, then ignored
    /// (a recipient MUST ignore unrecognized ones).
    ///
    /// ```
    /// chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
    /// chunk-ext-name = token
    /// chunk-ext-val  = token / quoted-string
    /// ```
    private mutating func extensionStep(_ byte: UInt8, offset: Int) throws(WireError) {
        let isSpace = byte == 0x20 || byte == 0x09
        let isToken = HTTPByteClass.isTokenByte(byte)
        let semicolon = byte == UInt8(ascii: ";")
        switch state {
        case .sizeLineRest, .sizeWhitespace:
            if isSpace { state = .sizeWhitespace } else if semicolon { state = .extensionNameStart } else {
                throw state == .sizeLineRest
                    ? WireError(
                        .invalidChunkSize, offset: offset,
                        "byte 0x\(HTTPByteClass.hex(byte)) after the chunk size is neither whitespace, \";\" nor CRLF")
                    : Self.malformedLine(state, offset)
            }
        case .extensionNameStart:
            if isToken { state = .extensionName } else if !isSpace { throw Self.malformedLine(state, offset) }
        case .extensionName, .extensionAfterName:
            if isToken && state == .extensionName { break }
            if isSpace { state = .extensionAfterName } else if semicolon { state = .extensionNameStart } else if byte
                == UInt8(ascii: "=")
            {
                state = .extensionValueStart
            } else {
                throw Self.malformedLine(state, offset)
            }
        case .extensionValueStart:
            if isToken { state = .extensionToken } else if byte == UInt8(ascii: "\"") { state = .extensionQuoted } else if !isSpace {
                throw Self.malformedLine(state, offset)
            }
        case .extensionToken, .extensionAfterValue:
            if isToken && state == .extensionToken { break }
            if isSpace { state = .extensionAfterValue } else if semicolon { state = .extensionNameStart } else {
                throw Self.malformedLine(state, offset)
            }
        case .extensionQuoted:
            // qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text
            if byte == UInt8(ascii: "\"") {
                state = .extensionAfterValue
            } else if byte == UInt8(ascii: "\\") {
                state = .extensionQuotedEscape
            } else if !(isSpace || (byte >= 0x21 && byte != 0x7F)) {
                throw Self.malformedLine(state, offset)
            }
        case .extensionQuotedEscape:
            // quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )
            guard isSpace || (byte >= 0x21 && byte != 0x7F) else { throw Self.malformedLine(state, offset) }
            state = .extensionQuoted
        default:
            preconditionFailure("ChunkedDecoder.extensionStep called in state \(state)")
        }
    }

    /// A chunk-size line that breaks the extension grammar at `offset` (in `state`).
    private static func malformedLine(_ state: State, _ offset: Int) -> WireError {
        if state == .sizeWhitespace {
            return WireError(
                .invalidChunkSize, offset: offset,
                "whitespace after the chunk size is not followed by \";\" (RFC 9112 §7.1.1 allows none before CRLF)")
        }
        let what: String
        switch state {
        case .extensionNameStart: what = "an empty chunk extension (\";\" without a name)"
        case .extensionValueStart: what = "a chunk extension with \"=\" but no value"
        case .extensionQuoted, .extensionQuotedEscape: what = "an unterminated or invalid quoted chunk-extension value"
        default: what = "a malformed chunk extension"
        }
        return WireError(.invalidChunkExtension, offset: offset, "chunk-size line has \(what) (RFC 9112 §7.1.1)")
    }

    /// A description of where the body stopped, for ``WireError/Code/incompleteChunkedBody``.
    var positionDescription: String {
        switch state {
        case .data:
            return "inside a chunk with \(chunkRemaining) of its bytes missing"
        case .dataCR, .dataLF:
            return "before the CRLF that ends a chunk"
        case .size, .sizeLineRest, .sizeWhitespace, .extensionNameStart, .extensionName, .extensionAfterName,
            .extensionValueStart, .extensionToken, .extensionQuoted, .extensionQuotedEscape, .extensionAfterValue,
            .sizeLineLF:
            return "inside a chunk-size line; the last chunk (size 0) was never received"
        case .trailerLineStart, .trailerLine, .trailerLineLF, .finalLF:
            return "inside the trailer section after the last chunk"
        case .done:
            return "after the end of the body"
        }
    }

    @inline(__always)
    private mutating func countLineByte(limits: ParserLimits, offset: Int) throws(WireError) {
        lineBytes += 1
        if lineBytes > limits.maxChunkLineBytes {
            throw WireError(
                .chunkLineTooLong, offset: offset,
                "chunk-size line is longer than maxChunkLineBytes (\(limits.maxChunkLineBytes))")
        }
    }

    @inline(__always)
    private mutating func countTrailerByte(limits: ParserLimits, offset: Int) throws(WireError) {
        trailerBytes += 1
        if trailerBytes > limits.maxTrailerBytes {
            throw WireError(
                .trailerTooLarge, offset: offset,
                "trailer section is larger than maxTrailerBytes (\(limits.maxTrailerBytes))")
        }
    }

    private static func bareLF(_ offset: Int, _ place: String) -> WireError {
        WireError(.invalidChunkTerminator, offset: offset, "bare LF in \(place); chunked framing requires CRLF")
    }

    private static func crWithoutLF(_ offset: Int, _ place: String) -> WireError {
        WireError(.invalidChunkTerminator, offset: offset, "CR not followed by LF in \(place)")
    }

    @inline(__always)
    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte &- UInt8(ascii: "a") &+ 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte &- UInt8(ascii: "A") &+ 10
        default: return nil
        }
    }
}
