// libFuzzer harness for the HTTPWire header grammars and URL handling.
//
// Compiled by Scripts/fuzz.sh into the one fuzz binary with Sources/HTTPWire/*.swift (one module, so
// it needs no import). The first input byte picks the grammar; the rest is the text fed to it. Besides "never
// crash", each mode checks properties that must hold for every accepted input: serialising a parsed
// value and parsing it again gives the same value, and nothing unsafe reaches a request line.

/// Whether text is safe on a request line or in a field value: visible ASCII only.
func isVisibleASCII(_ text: String) -> Bool { text.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F } }

/// What RequestHead accepts as an origin-form target: starts with "/", visible ASCII, no "#".
func isSafeRequestTarget(_ target: String) -> Bool {
    target.hasPrefix("/") && isVisibleASCII(target) && !target.utf8.contains(0x23)
}

let fuzzBase: HTTPURL? = try? HTTPURL("http://user:pw@a/b/c/d;p?q")

func fuzzURL(_ text: String) {
    guard let url = try? HTTPURL(text) else { return }
    check((try? HTTPURL(url.absoluteString)) == url, "URL round trip: \(url.absoluteString)")
    check(isSafeRequestTarget(url.requestTarget), "request target \(url.requestTarget)")
    check(isVisibleASCII(url.hostHeaderValue), "Host value \(url.hostHeaderValue)")
    check(!url.host.isEmpty, "empty host")
    check((1...65535).contains(url.effectivePort), "port \(url.effectivePort)")
    _ = url.description
    _ = url.origin.description
    _ = url.pathExtension
    _ = url.basicAuthorization
}

func fuzzResolution(_ text: String) {
    guard let base = fuzzBase, let url = try? base.resolving(text) else { return }
    check((try? HTTPURL(url.absoluteString)) == url, "resolved round trip: \(url.absoluteString)")
    check(isSafeRequestTarget(url.requestTarget), "resolved request target \(url.requestTarget)")
    check((try? url.resolving(url.absoluteString)) == url, "resolving an absolute URL is the identity")
}

func fuzzRange(_ text: String) {
    guard let header = try? RangeHeader(parsing: text) else { return }
    check(!header.ranges.isEmpty && header.ranges.allSatisfy(\.isValid), "invalid ranges \(header.ranges)")
    check((try? RangeHeader(parsing: header.headerValue)) == header, "Range round trip: \(header.headerValue)")
    for range in header.ranges {
        for length: Int64 in [0, 1, 1000, Int64.max] {
            if let bounds = range.bounds(forCompleteLength: length) {
                check(bounds.lowerBound >= 0 && bounds.upperBound < length, "bounds \(bounds) for \(length)")
            }
        }
    }
}

func fuzzContentRange(_ text: String) {
    guard let range = try? ContentRange(parsing: text) else { return }
    check((try? ContentRange(parsing: range.headerValue)) == range, "Content-Range round trip: \(range.headerValue)")
    if case .satisfied(let first, let last, let complete) = range {
        check(first >= 0 && first <= last && (complete.map { last < $0 } ?? true), "impossible \(range)")
        check(range.length.map { $0 > 0 } ?? false, "length of \(range)")
    }
}

func fuzzEntityTag(_ text: String) {
    guard let tag = try? EntityTag(parsing: text) else { return }
    check((try? EntityTag(parsing: tag.headerValue)) == tag, "ETag round trip: \(tag.headerValue)")
    check(tag.weakMatches(tag) && tag.strongMatches(tag) == !tag.isWeak, "ETag self-comparison")
    check(!tag.headerValue.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0 }, "control byte in ETag")
}

func fuzzDate(_ text: String) {
    for now in [nil, Int64(1_735_689_600)] {
        guard let date = try? HTTPDate(parsing: text, now: now) else { continue }
        check((try? HTTPDate(parsing: date.headerValue)) == date, "date round trip: \(date.headerValue)")
    }
}

func fuzzContentDisposition(_ text: String) {
    guard let value = try? ContentDisposition(parsing: text) else { return }
    check(
        (try? ContentDisposition(parsing: value.headerValue)) == value, "disposition round trip: \(value.headerValue)")
    _ = value.preferredFilename
}

func fuzzRetryAfter(_ text: String) {
    guard let value = try? RetryAfter(parsing: text) else { return }
    check((try? RetryAfter(parsing: value.headerValue)) == value, "Retry-After round trip: \(value.headerValue)")
    for now: Int64 in [Int64.min, -1, 0, 1_735_689_600, Int64.max] {
        check(value.delay(fromSecondsSince1970: now) >= 0, "negative delay")
    }
}

func fuzzContentMD5(_ text: String) {
    guard let value = try? ContentMD5(parsing: text) else { return }
    check(value.digest.count == 16, "digest length")
    check((try? ContentMD5(parsing: value.headerValue)) == value, "Content-MD5 round trip")
}

func fuzzBase64(_ text: String, _ bytes: UnsafeBufferPointer<UInt8>) {
    if let decoded = try? Base64.decode(text) {
        check(Base64.encode(decoded) == text, "base64 is not canonical: \(text)")
    }
    let raw = Array(bytes)
    check((try? Base64.decode(Base64.encode(raw))) == raw, "base64 round trip")
}

func fuzzListsAndEscapes(_ text: String) {
    if let value = try? AcceptRanges(parsing: text) {
        check((try? AcceptRanges(parsing: value.headerValue)) == value, "Accept-Ranges round trip")
    }
    check((try? PercentEncoding.decode(PercentEncoding.encodeUserinfoComponent(text))) == Array(text.utf8),
        "userinfo encoding round trip")
    if let strict = try? PercentEncoding.decode(text) {
        check(strict == PercentEncoding.decodeLeniently(text), "strict and lenient decoding disagree")
    }
    check(PercentEncoding.encodeNonASCII(text).utf8.allSatisfy { $0 < 0x80 }, "non-ASCII left after encoding")
    _ = ContentDisposition.decodeExtendedValue(text)
}

/// One input (Fuzz/FuzzMain.swift calls it when the binary runs as `fuzz-grammars`).
func fuzzGrammars(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 1 else { return 0 }
    let bytes = UnsafeBufferPointer(start: data + 1, count: size - 1)
    let text = String(decoding: bytes, as: UTF8.self)
    switch data[0] % 11 {
    case 0: fuzzURL(text)
    case 1: fuzzResolution(text)
    case 2: fuzzRange(text)
    case 3: fuzzContentRange(text)
    case 4: fuzzEntityTag(text)
    case 5: fuzzDate(text)
    case 6: fuzzContentDisposition(text)
    case 7: fuzzRetryAfter(text)
    case 8: fuzzContentMD5(text)
    case 9: fuzzBase64(text, bytes)
    default: fuzzListsAndEscapes(text)
    }
    return 0
}
