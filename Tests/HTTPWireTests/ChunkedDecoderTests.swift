import Testing

@testable import HTTPWire

/// One chunked body (no head) and what decoding it must give.
struct ChunkedCase: Sendable, CustomTestStringConvertible {
    var name: String
    var input: String
    var limits: ParserLimits = .default
    var payload: String = ""
    /// Bytes after the body that the decoder must leave alone.
    var leftover = 0
    var error: WireError.Code? = nil
    var errorOffset: Int? = nil

    var testDescription: String { name }
}

/// What decoding produced; identical however the input is split.
struct ChunkedOutcome: Hashable {
    var payload: [UInt8] = []
    var ended = false
    var consumed = 0
    var error: WireError?
}

/// Feeds `input` to a decoder in `pieces`, carrying unconsumed bytes over like a receive buffer.
func decodeChunked(_ input: [UInt8], pieces: [Range<Int>], limits: ParserLimits) -> ChunkedOutcome {
    var decoder = ChunkedDecoder()
    var outcome = ChunkedOutcome()
    var pending: [UInt8] = []
    var offset = 0
    do throws(WireError) {
        feeding: for piece in pieces {
            pending.append(contentsOf: input[piece])
            while !pending.isEmpty {
                let base = offset
                let step = try pending.withUnsafeBytes { bytes in
                    Result { () throws(WireError) in try decoder.decode(bytes, limits: limits, baseOffset: base) }
                }.get()
                #expect(step.consumed > 0 || step.event == .end, "no progress")
                switch step.event {
                case .body(let range):
                    #expect(!range.isEmpty && range.upperBound == step.consumed)
                    outcome.payload += pending[range]
                case .end:
                    outcome.ended = true
                case .needMore:
                    #expect(step.consumed == pending.count)
                case .head:
                    Issue.record("decoder reported a head")
                }
                pending.removeFirst(step.consumed)
                offset += step.consumed
                if outcome.ended { break feeding }
                if step.consumed == 0 { break feeding }
            }
        }
    } catch {
        outcome.error = error
    }
    outcome.consumed = outcome.error == nil ? offset : 0
    return outcome
}

let chunkedCases: [ChunkedCase] = [
    ChunkedCase(name: "single chunk", input: "5\r\nhello\r\n0\r\n\r\n", payload: "hello"),
    ChunkedCase(name: "empty body is just the last chunk", input: "0\r\n\r\n"),
    ChunkedCase(
        name: "several chunks, mixed-case hex",
        input: "3\r\nabc\r\nA\r\n0123456789\r\nf\r\nABCDEFGHIJKLMNO\r\n0\r\n\r\n",
        payload: "abc0123456789ABCDEFGHIJKLMNO"),
    ChunkedCase(
        name: "chunk data may contain CRLF", input: "4\r\n\r\n\r\n\r\n0\r\n\r\n", payload: "\r\n\r\n"),
    ChunkedCase(
        name: "extensions with BWS and quoted strings are skipped",
        input: "5 ;\ta = 1 ; b=\"x;y\"\r\nhello\r\n0 ; final\r\n\r\n", payload: "hello"),
    ChunkedCase(
        name: "trailers are discarded and the rest is left alone",
        input: "2\r\nok\r\n0\r\nDigest: sha-256=abc\r\nX: y\r\n\r\nHTTP/1.1", payload: "ok", leftover: 8),
    ChunkedCase(name: "last chunk with many zeros", input: "0000\r\n\r\n"),
    ChunkedCase(
        name: "size at the digit limit", input: "ff\r\n" + String(repeating: "z", count: 255) + "\r\n0\r\n\r\n",
        limits: ParserLimits(maxChunkSizeDigits: 2), payload: String(repeating: "z", count: 255)),
    ChunkedCase(
        name: "size over the digit limit", input: "0ff\r\n", limits: ParserLimits(maxChunkSizeDigits: 2),
        error: .chunkSizeTooLong, errorOffset: 2),
    ChunkedCase(
        name: "chunk line exactly at its limit", input: "1;abcdef\r\nx\r\n0\r\n\r\n",
        limits: ParserLimits(maxChunkLineBytes: 8), payload: "x"),
    ChunkedCase(
        name: "chunk line one byte over its limit", input: "1;abcdefg\r\nx\r\n0\r\n\r\n",
        limits: ParserLimits(maxChunkLineBytes: 8), error: .chunkLineTooLong, errorOffset: 8),
    ChunkedCase(
        name: "trailer exactly at its limit", input: "0\r\nA: 1\r\n\r\n", limits: ParserLimits(maxTrailerBytes: 8)),
    ChunkedCase(
        name: "trailer one byte over its limit", input: "0\r\nA: 12\r\n\r\n", limits: ParserLimits(maxTrailerBytes: 8),
        error: .trailerTooLarge, errorOffset: 11),
    ChunkedCase(name: "overflowing size", input: "ffffffffffffffffff\r\n", error: .chunkSizeOverflow, errorOffset: 15),
    ChunkedCase(name: "17 hex digits", input: "00000000000000001\r\n", error: .chunkSizeTooLong, errorOffset: 16),
    ChunkedCase(name: "no size digits", input: "\r\n", error: .invalidChunkSize, errorOffset: 0),
    ChunkedCase(name: "sign before size", input: "+5\r\nhello\r\n0\r\n\r\n", error: .invalidChunkSize, errorOffset: 0),
    ChunkedCase(name: "0x prefix", input: "0x5\r\nhello\r\n0\r\n\r\n", error: .invalidChunkSize, errorOffset: 1),
    ChunkedCase(
        name: "bare LF after size", input: "5\nhello\r\n0\r\n\r\n", error: .invalidChunkTerminator, errorOffset: 1),
    ChunkedCase(name: "CR without LF after size", input: "5\rhello", error: .invalidChunkTerminator, errorOffset: 2),
    ChunkedCase(
        name: "bare LF after data", input: "5\r\nhello\n0\r\n\r\n", payload: "hello", error: .invalidChunkTerminator,
        errorOffset: 8),
    ChunkedCase(
        name: "missing CRLF after data", input: "5\r\nhello0\r\n\r\n", payload: "hello", error: .invalidChunkTerminator,
        errorOffset: 8),
    ChunkedCase(
        name: "CR without LF after data", input: "5\r\nhello\r0\r\n\r\n", payload: "hello",
        error: .invalidChunkTerminator, errorOffset: 9),
    ChunkedCase(
        name: "CR without LF in a trailer line", input: "0\r\nA: 1\rB\r\n\r\n", error: .invalidChunkTerminator,
        errorOffset: 8),
    ChunkedCase(
        name: "bare LF in a trailer line", input: "0\r\nA: 1\n\r\n", error: .invalidChunkTerminator, errorOffset: 7),
    ChunkedCase(name: "bare LF ending the body", input: "0\r\n\n", error: .invalidChunkTerminator, errorOffset: 3),
    ChunkedCase(
        name: "CR then junk ending the body", input: "0\r\n\rX", error: .invalidChunkTerminator, errorOffset: 4),
]

@Suite struct ChunkedDecoderTests {
    @Test(arguments: chunkedCases)
    func chunkedCaseGivesTheSameResultHoweverTheInputIsSplit(_ testCase: ChunkedCase) {
        let input = Array(testCase.input.utf8)
        let reference = decodeChunked(input, pieces: [0..<input.count], limits: testCase.limits)
        if let code = testCase.error {
            #expect(reference.error?.code == code, "\(String(describing: reference.error))")
            if let offset = testCase.errorOffset { #expect(reference.error?.offset == offset) }
        } else {
            #expect(reference.error == nil, "\(String(describing: reference.error))")
            #expect(reference.ended)
            #expect(reference.consumed == input.count - testCase.leftover)
        }
        #expect(String(decoding: reference.payload, as: UTF8.self) == testCase.payload)

        var splits = [(0..<input.count).map { $0..<($0 + 1) }]
        for point in 1..<max(1, input.count) { splits.append([0..<point, point..<input.count]) }
        for pieces in splits {
            let outcome = decodeChunked(input, pieces: pieces, limits: testCase.limits)
            #expect(outcome == reference, "pieces \(pieces) differ from all at once")
            if outcome != reference { break }
        }
    }

    @Test func payloadIsReturnedInPlaceWithoutCopying() throws {
        // One chunk arriving whole comes back as one range of the caller's buffer, after its size line.
        var decoder = ChunkedDecoder()
        let bytes = Array("400\r\n".utf8) + [UInt8](repeating: 0x2A, count: 0x400) + Array("\r\n".utf8)
        let step = try bytes.withUnsafeBytes { buffer in
            Result { () throws(WireError) in try decoder.decode(buffer, limits: .default, baseOffset: 0) }
        }.get()
        #expect(step == ParseStep(event: .body(5..<(5 + 0x400)), consumed: 5 + 0x400))
        #expect(decoder.state == .dataCR)
    }

    @Test func positionDescriptionSaysWhereTheBodyStopped() throws {
        func decoder(after text: String) throws -> ChunkedDecoder {
            var decoder = ChunkedDecoder()
            let bytes = Array(text.utf8)
            var offset = 0
            while offset < bytes.count {
                let base = offset
                let step = try bytes.withUnsafeBytes { buffer in
                    Result { () throws(WireError) in
                        try decoder.decode(
                            UnsafeRawBufferPointer(rebasing: buffer[base...]), limits: .default, baseOffset: base)
                    }
                }.get()
                offset += step.consumed
            }
            return decoder
        }
        #expect(try decoder(after: "a\r\nhel").positionDescription.contains("7 of its bytes missing"))
        #expect(try decoder(after: "3\r\nabc").positionDescription.contains("before the CRLF"))
        #expect(
            try decoder(after: "3\r\nabc\r\n").positionDescription.contains("last chunk (size 0) was never received"))
        #expect(try decoder(after: "0\r\nX: 1\r\n").positionDescription.contains("trailer section"))
    }
}
