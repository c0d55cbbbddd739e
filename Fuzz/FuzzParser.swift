// libFuzzer harness for ResponseParser and body framing (Content-Length, chunked, close-delimited).
//
// Compiled by Scripts/fuzz.sh into the one fuzz binary with Sources/HTTPWire/*.swift.
// Input layout: byte 0 holds flags (bit 0: the request was HEAD; bit 1: tight ParserLimits so limit
// paths are reachable with short inputs), bytes 1–4 seed the split points, the rest is what the
// server sent. The stream is fed three ways — all at once, byte by byte, and in pieces whose sizes
// the seed picks — and the three event logs must be identical (B10: "every case also runs byte by
// byte, in random splits and all at once"). Every piece is copied into an allocation of exactly its
// size, so AddressSanitizer reports any read past the bytes handed to the parser, and every body
// range must lie within the bytes the step consumed.

/// One entry of the normalised event log; adjacent body events are merged (their split differs).
enum LogEntry: Equatable {
    case head(ResponseHead)
    case body([UInt8])
    case end
    case failed(code: String, offset: Int?)
}

struct ParserRun {
    let method: DKHTTPMethod
    let limits: ParserLimits
    var parser: ResponseParser
    var log: [LogEntry] = []
    /// The message ended and the connection is not reusable, or the parser failed: input after this is ignored.
    var stopped = false
    /// Bytes of the current message consumed (0 right after a reset: nothing of a next message seen).
    var messageBytes = 0
    var messageBody = 0
    var messages = 0

    init(method: DKHTTPMethod, limits: ParserLimits) {
        self.method = method
        self.limits = limits
        parser = ResponseParser(requestMethod: method, limits: limits)
    }

    mutating func append(_ entry: LogEntry) {
        if case .body(let more) = entry, case .body(let earlier)? = log.last {
            log[log.count - 1] = .body(earlier + more)
        } else {
            log.append(entry)
        }
    }

    /// Feeds `pending`; returns how many of its bytes were consumed.
    mutating func feed(_ pending: [UInt8]) -> Int {
        // An exactly sized copy: ASan reports any read past its end.
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(pending.count, 1), alignment: 1)
        defer { buffer.deallocate() }
        let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<pending.count])
        pending.withUnsafeBytes { source in
            if !source.isEmpty { buffer.copyMemory(from: source) }
        }
        var offset = 0
        while !stopped {
            let slice = UnsafeRawBufferPointer(rebasing: bytes[offset...])
            let step: ParseStep
            do {
                step = try parser.next(slice)
            } catch {
                append(.failed(code: error.code.name, offset: error.offset))
                stopped = true
                break
            }
            check(step.consumed >= 0 && step.consumed <= slice.count, "consumed \(step.consumed) of \(slice.count)")
            if step.event != .end {
                check(slice.isEmpty || step.consumed > 0, "no progress on \(slice.count) bytes: \(step.event)")
            }
            offset += step.consumed
            messageBytes += step.consumed
            switch step.event {
            case .needMore:
                check(offset == bytes.count, "needMore with \(bytes.count - offset) bytes unconsumed")
                return offset
            case .head(let head):
                check(!head.isInformational, "interim head reported: \(head.status)")
                check(parser.framing != nil, "head without framing")
                append(.head(head))
            case .body(let range):
                check(range.lowerBound >= 0 && range.upperBound <= step.consumed, "body \(range) beyond \(step.consumed)")
                messageBody += range.count
                if case .contentLength(let length)? = parser.framing {
                    check(Int64(messageBody) <= length, "body \(messageBody) longer than Content-Length \(length)")
                }
                append(.body(Array(slice[range])))
            case .end:
                check(Int64(messageBody) == parser.bodyBytesReceived, "body count \(messageBody) vs \(parser.bodyBytesReceived)")
                if case .contentLength(let length)? = parser.framing {
                    check(Int64(messageBody) == length, "ended after \(messageBody) of \(length)")
                }
                append(.end)
                messages += 1
                if parser.isReusable && messages < 8 {
                    parser.reset(requestMethod: method)
                    messageBytes = 0
                    messageBody = 0
                } else {
                    stopped = true
                }
            }
        }
        return offset
    }

    /// The peer closed the connection.
    mutating func finish() {
        guard !stopped, messageBytes > 0 || messages == 0 else { return }
        do {
            let event = try parser.finish()
            check(event == .end, "finish returned \(event)")
            append(.end)
        } catch {
            append(.failed(code: error.code.name, offset: error.offset))
        }
    }
}

func parse(_ stream: [UInt8], pieces sizes: [Int], method: DKHTTPMethod, limits: ParserLimits) -> [LogEntry] {
    var run = ParserRun(method: method, limits: limits)
    var pending: [UInt8] = []
    var position = 0
    for size in sizes where !run.stopped {
        pending.append(contentsOf: stream[position..<(position + size)])
        position += size
        let consumed = run.feed(pending)
        pending.removeFirst(consumed)
    }
    check(position == stream.count || run.stopped, "pieces do not cover the stream")
    if !run.stopped { _ = run.feed(pending) }
    run.finish()
    return run.log
}

let tightLimits = ParserLimits(
    maxHeadBytes: 200, maxHeaderCount: 6, maxChunkSizeDigits: 4, maxChunkLineBytes: 24, maxTrailerBytes: 40)

/// One input (Fuzz/FuzzMain.swift calls it when the binary runs as `fuzz-parser`).
func fuzzParser(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 5 else { return 0 }
    let flags = data[0]
    var seed: UInt64 = 0
    for index in 1...4 { seed = seed << 8 | UInt64(data[index]) }
    let stream = Array(UnsafeBufferPointer(start: data + 5, count: size - 5))
    let method: DKHTTPMethod = flags & 1 == 0 ? .GET : .HEAD
    let limits = flags & 2 == 0 ? ParserLimits.default : tightLimits

    var random = SplitMix64(state: seed)
    var split: [Int] = []
    var remaining = stream.count
    let largest = Int((seed >> 24) % 64) + 1
    while remaining > 0 {
        let piece = min(remaining, random.next(atMost: largest))
        split.append(piece)
        remaining -= piece
    }

    let whole = parse(stream, pieces: stream.isEmpty ? [] : [stream.count], method: method, limits: limits)
    let byteByByte = parse(stream, pieces: Array(repeating: 1, count: stream.count), method: method, limits: limits)
    check(whole == byteByByte, "all at once \(whole) vs byte by byte \(byteByByte)")
    let pieces = parse(stream, pieces: split, method: method, limits: limits)
    check(whole == pieces, "all at once \(whole) vs pieces \(split): \(pieces)")
    return 0
}
