// libFuzzer harness for the proxy grammars in HTTPWire: the answer to CONNECT (HTTPConnectTunnel),
// SOCKS5 replies, NO_PROXY lists and IP address text, and proxy URLs.
//
// Compiled by Scripts/fuzz.sh into the one fuzz binary (Fuzz/FuzzMain.swift) with Sources/HTTPWire/*.swift. The first input byte picks the mode (and, for the stream modes, seeds where the input is
// split); the rest is the input. Besides "never crash": the same bytes give the same outcome however
// they are split, a parsed SOCKS5 reply takes exactly its own bytes, and lists and URLs round-trip.

/// Feeds `bytes` to a CONNECT answer reader in pieces; returns the outcome or the error's code.
func connectOutcome(_ bytes: [UInt8], pieces: inout SplitMix64?) -> String {
    var parser = HTTPConnectTunnel.makeParser()
    var start = 0
    var outcome = "needMore"
    while start < bytes.count {
        let size = pieces.map { var generator = $0; let n = generator.next(atMost: 64); pieces = generator; return n }
            ?? bytes.count
        let end = min(bytes.count, start + size)
        do {
            let result = try bytes[start..<end].withUnsafeBytes { raw throws(WireError) in
                try HTTPConnectTunnel.read(raw, parser: &parser)
            }
            switch result {
            case .needMore: outcome = "needMore"
            case .established(let head, _): return "established \(head.status)"
            case .refused(let head): return "refused \(head.status)"
            }
        } catch let error as WireError {
            return "error \(error.code)"
        } catch {
            return "error \(error)"
        }
        start = end
    }
    return outcome
}

func fuzzConnectAnswer(_ bytes: [UInt8], seed: UInt8) {
    var whole: SplitMix64? = nil
    var split: SplitMix64? = SplitMix64(state: UInt64(seed))
    let a = connectOutcome(bytes, pieces: &whole)
    let b = connectOutcome(bytes, pieces: &split)
    // Bytes after a 2xx are an error only when they arrive with the head; when split, they may be
    // the next read's. Every other outcome must agree.
    if a.hasPrefix("error unexpectedBytesAfterConnect") {
        check(b.hasPrefix("established 2") || b == a, "split changed \(a) into \(b)")
    } else {
        check(a == b, "split changed \(a) into \(b)")
    }
    if a.hasPrefix("established") { check(a.dropFirst(12).hasPrefix("2"), "established with \(a)") }
}

func fuzzSOCKSReplies(_ bytes: [UInt8]) {
    let full = try? SOCKS5.parseReply(bytes)
    if let (reply, consumed) = full {
        check(consumed <= bytes.count && consumed >= 7, "consumed \(consumed) of \(bytes.count)")
        check((try? SOCKS5.parseReply(bytes.prefix(consumed)))?.consumed == consumed, "reply needs only its bytes")
        check((try? SOCKS5.parseReply(bytes.prefix(consumed - 1))) == nil, "a reply cut short is incomplete")
        check(!reply.code.name.isEmpty && (0...65535).contains(reply.boundPort), "reply fields")
        if case .domain(let name) = reply.boundAddress, let request = try? SOCKS5.connectRequest(to: .domain(name), port: max(1, reply.boundPort)) {
            check(request[3] == 3, "domain request type")
        }
    }
    for cut in 0..<min(bytes.count, 24) {
        // A prefix is never "more complete" than the whole: it is incomplete, the same, or an error.
        if let prefix = try? SOCKS5.parseReply(bytes.prefix(cut)) {
            check(full?.consumed == prefix.consumed, "prefix \(cut) parsed differently")
        }
    }
    _ = try? SOCKS5.parseMethodSelection(bytes)
    _ = try? SOCKS5.parseAuthenticationReply(bytes)
}

func fuzzNoProxy(_ text: String) {
    let list = NoProxyList(text)
    let again = NoProxyList(list.description)
    check(again == list, "NO_PROXY round trip: \(text) → \(list.description) → \(again.description)")
    for host in ["example.com", "a.example.com", "127.0.0.1", "::1", "10.1.2.3", "fd00::1", text] {
        check(list.matches(host: host) == again.matches(host: host), "matching changed for \(host)")
    }
    if let address = IPAddressText.parse(text) {
        check(address.count == 4 || address.count == 16, "address of \(address.count) bytes")
        check(IPAddressText.parse(IPAddressText.format(address)) == address, "IP text round trip: \(text)")
    }
}

func fuzzProxyURL(_ text: String) {
    guard let proxy = try? ProxyURL(text) else { return }
    check((1...65535).contains(proxy.port) && !proxy.host.isEmpty, "proxy authority \(proxy.authority)")
    if proxy.password != nil {
        // The userinfo is rendered as user + ":***@": the password itself never appears there.
        let userinfo = proxy.description.split(separator: "@", omittingEmptySubsequences: false).dropLast().joined(separator: "@")
        check(userinfo.hasSuffix(":***"), "the password is not masked: \(proxy.description)")
    }
    var again = proxy
    again.password = nil
    let reparsed = try? ProxyURL(again.description)
    check(reparsed?.host == proxy.host && reparsed?.port == proxy.port && reparsed?.kind == proxy.kind,
        "proxy URL round trip: \(again.description)")
    if let authorization = proxy.basicAuthorization { check(authorization.hasPrefix("Basic "), "Basic") }
}

/// One input (Fuzz/FuzzMain.swift calls it when the binary runs as `fuzz-proxy`).
func fuzzProxy(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 1 else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let text = String(decoding: bytes, as: UTF8.self)
    switch data[0] % 4 {
    case 0: fuzzConnectAnswer(bytes, seed: data[0])
    case 1: fuzzSOCKSReplies(bytes)
    case 2: fuzzNoProxy(text)
    default: fuzzProxyURL(text)
    }
    return 0
}
