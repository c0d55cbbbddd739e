import HTTPWire
import Testing

/// The pure proxy grammars (issue #17): NO_PROXY as curl reads it, proxy URLs, SOCKS5 messages,
/// the CONNECT exchange and absolute-form request targets.
@Suite struct NoProxyListTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var list: String
        var host: String
        var bypasses: Bool
        var testDescription: String { "\(list) ∋ \(host) = \(bypasses)" }
    }

    static let cases: [Case] = [
        Case(list: "*", host: "anything.example", bypasses: true),
        Case(list: "example.com", host: "example.com", bypasses: true),
        Case(list: "example.com", host: "a.b.example.com", bypasses: true),
        Case(list: "example.com", host: "badexample.com", bypasses: false),
        Case(list: ".example.com", host: "example.com", bypasses: true),
        Case(list: ".example.com", host: "www.example.com", bypasses: true),
        Case(list: "EXAMPLE.com.", host: "www.Example.COM", bypasses: true),
        Case(list: "example.com", host: "example.com.", bypasses: true),
        Case(list: "other.org, example.com", host: "www.example.com", bypasses: true),
        Case(list: "localhost,127.0.0.1", host: "127.0.0.1", bypasses: true),
        Case(list: "127.0.0.1", host: "127.0.0.2", bypasses: false),
        Case(list: "10.0.0.0/8", host: "10.200.3.4", bypasses: true),
        Case(list: "10.0.0.0/8", host: "11.0.0.1", bypasses: false),
        Case(list: "192.168.1.0/25", host: "192.168.1.127", bypasses: true),
        Case(list: "192.168.1.0/25", host: "192.168.1.128", bypasses: false),
        Case(list: "::1", host: "[::1]", bypasses: true),
        Case(list: "[::1]", host: "::1", bypasses: true),
        Case(list: "fd00::/8", host: "fd12:3456::1", bypasses: true),
        Case(list: "fd00::/8", host: "fe80::1", bypasses: false),
        Case(list: "example.com:8080", host: "example.com", bypasses: true),
        Case(list: "10.0.0.1:3128", host: "10.0.0.1", bypasses: true),
        // An IP entry never matches a name, and a name entry never matches an unrelated IP.
        Case(list: "127.0.0.1", host: "localhost", bypasses: false),
        Case(list: "localhost", host: "127.0.0.1", bypasses: false),
        Case(list: "", host: "example.com", bypasses: false),
        Case(list: "*.example.com", host: "www.example.com", bypasses: false),
    ]

    @Test(arguments: cases) func matchesAsCurlDoes(_ c: Case) {
        #expect(NoProxyList(c.list).matches(host: c.host) == c.bypasses)
    }

    /// Fuzzer findings: every list reads back the same from its description.
    @Test func oddEntriesRoundTrip() {
        #expect(NoProxyList("*:80").entries == [.any])
        #expect(NoProxyList("10.0.0.1.").entries == [.network(address: [10, 0, 0, 1], prefixLength: 32)])
        #expect(NoProxyList(".[x],a:b:c").entries.isEmpty)
        for text in ["a,\u{301}b", ".[\u{0}]:", "[::0]80,0.08,*:", "x\u{c}y, ::1 ,10.0.0.0/33"] {
            let list = NoProxyList(text)
            #expect(NoProxyList(list.description) == list, "\(text)")
        }
    }

    @Test func describesItsEntries() {
        #expect(NoProxyList(" .Example.com , 10.0.0.0/8,::1,*").description == "example.com,10.0.0.0/8,::1,*")
    }

    @Test func ipAddressTextRoundTrips() {
        #expect(IPAddressText.parse("::ffff:10.1.2.3") == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 1, 2, 3])
        #expect(IPAddressText.format(IPAddressText.parse("2001:db8:0:0:1:0:0:1") ?? []) == "2001:db8::1:0:0:1")
        #expect(IPAddressText.format(IPAddressText.parse("fe80::1%eth0") ?? []) == "fe80::1")
        for bad in ["1.2.3", "256.1.1.1", "1::2::3", "12345::", ":::", "1.2.3.4.5", "g::1", ""] {
            #expect(IPAddressText.parse(bad) == nil, "\(bad)")
        }
    }
}

@Suite struct ProxyURLTests {
    @Test func parsesKindsCredentialsAndDefaults() throws {
        let http = try ProxyURL("http://alice:p%40ss@Proxy.Example:3128")
        #expect(http.kind == .http && http.host == "proxy.example" && http.port == 3128)
        #expect(http.user == "alice" && http.password == "p@ss")
        #expect(http.basicAuthorization == "Basic YWxpY2U6cEBzcw==")
        #expect(http.description == "http://alice:***@proxy.example:3128")
        let bare = try ProxyURL("10.0.0.1:8080")
        #expect(bare.kind == .http && bare.port == 8080 && bare.user == nil && bare.basicAuthorization == nil)
        let socks = try ProxyURL("SOCKS5H://[::1]")
        #expect(socks.kind == .socks5h && socks.host == "::1" && socks.port == 1080 && socks.authority == "[::1]:1080")
        #expect(try ProxyURL("socks5://h:1").kind == .socks5)
    }

    @Test func refusesUnsupportedSchemesAndBadAuthorities() {
        #expect(throws: WireError.self) { try ProxyURL("https://proxy:443") }
        #expect(throws: WireError.self) { try ProxyURL("socks4://proxy:1080") }
        #expect(throws: WireError.self) { try ProxyURL("http://proxy:99999") }
        #expect(throws: WireError.self) { try ProxyURL("http://pro xy:1") }
        do {
            _ = try ProxyURL("ftp://proxy")
            Issue.record("ftp:// accepted")
        } catch {
            #expect(error.code == .unsupportedProxyScheme)
        }
    }

    @Test func absoluteFormTargetsEncodeAndCarryNoUserinfoOrFragment() throws {
        let url = try HTTPURL("http://user:pw@Example.com:8080/a%20b/ß?q=1#frag")
        #expect(url.absoluteFormTarget == "http://example.com:8080/a%20b/%C3%9F?q=1")
        let head = RequestHead(method: .GET, target: url.absoluteFormTarget, host: url.hostHeaderValue)
        #expect(String(decoding: try head.encoded(), as: UTF8.self).hasPrefix("GET http://example.com:8080/a%20b/%C3%9F?q=1 HTTP/1.1\r\nHost: example.com:8080\r\n"))
        #expect(try HTTPURL("http://[::1]/").absoluteFormTarget == "http://[::1]/")
    }
}

@Suite struct SOCKS5MessageTests {
    @Test func encodesGreetingAuthenticationAndConnect() throws {
        #expect(SOCKS5.greeting(offeringUsernamePassword: false) == [5, 1, 0])
        #expect(SOCKS5.greeting(offeringUsernamePassword: true) == [5, 2, 0, 2])
        #expect(try SOCKS5.usernamePasswordRequest(user: "bob", password: "pw") == [1, 3, 98, 111, 98, 2, 112, 119])
        #expect(try SOCKS5.connectRequest(to: .ipv4([127, 0, 0, 1]), port: 443) == [5, 1, 0, 1, 127, 0, 0, 1, 1, 187])
        #expect(try SOCKS5.connectRequest(to: .domain("ab.c"), port: 80) == [5, 1, 0, 3, 4, 97, 98, 46, 99, 0, 80])
        let v6 = try SOCKS5.connectRequest(to: .ipv6([UInt8](repeating: 0, count: 15) + [1]), port: 8080)
        #expect(v6.count == 22 && v6[3] == 4 && v6[19] == 1 && v6[20] == 0x1F && v6[21] == 0x90)
        #expect(throws: WireError.self) { try SOCKS5.usernamePasswordRequest(user: "", password: "x") }
        #expect(throws: WireError.self) {
            try SOCKS5.usernamePasswordRequest(user: "u", password: String(repeating: "x", count: 256))
        }
        #expect(throws: WireError.self) { try SOCKS5.connectRequest(to: .domain(String(repeating: "a", count: 256)), port: 1) }
        #expect(throws: WireError.self) { try SOCKS5.connectRequest(to: .ipv4([1, 2, 3]), port: 1) }
        #expect(throws: WireError.self) { try SOCKS5.connectRequest(to: .ipv4([1, 2, 3, 4]), port: 0) }
    }

    @Test func decodesRepliesIncrementallyAndNamesTheirCodes() throws {
        #expect(try SOCKS5.parseMethodSelection([5]) == nil)
        #expect(try SOCKS5.parseMethodSelection([5, 2]) == 2)
        #expect(throws: WireError.self) { try SOCKS5.parseMethodSelection([4, 0]) }
        #expect(try SOCKS5.parseAuthenticationReply([1, 0]) == true)
        #expect(try SOCKS5.parseAuthenticationReply([1, 1]) == false)
        #expect(throws: WireError.self) { try SOCKS5.parseAuthenticationReply([5, 0]) }

        let reply: [UInt8] = [5, 0, 0, 1, 127, 0, 0, 1, 0x1F, 0x90]
        for cut in 0..<reply.count { #expect(try SOCKS5.parseReply(reply[0..<cut]) == nil) }
        let parsed = try #require(try SOCKS5.parseReply(reply + [9, 9]))
        #expect(parsed.consumed == 10 && parsed.reply.code.isSuccess && parsed.reply.boundPort == 8080)
        let domain = try #require(try SOCKS5.parseReply([5, 5, 0, 3, 2, 104, 105, 0, 1]))
        #expect(domain.reply.boundAddress == .domain("hi") && domain.consumed == 9)
        #expect(domain.reply.code.description == "connection refused (SOCKS reply 5)" && domain.reply.code.isTransient)
        #expect(!SOCKS5.ReplyCode(2).isTransient && SOCKS5.ReplyCode(2).name == "connection not allowed by ruleset")
        #expect(SOCKS5.ReplyCode(0x7F).name == "unassigned reply code")
        #expect(throws: WireError.self) { try SOCKS5.parseReply([4, 0, 0, 1]) }
        #expect(throws: WireError.self) { try SOCKS5.parseReply([5, 0, 1, 1]) }
        #expect(throws: WireError.self) { try SOCKS5.parseReply([5, 0, 0, 9]) }
        #expect(throws: WireError.self) { try SOCKS5.parseReply([0x48]) }  // "H": an HTTP proxy answered
    }
}

@Suite struct ConnectTunnelTests {
    func read(_ text: String, in pieces: Int = 1) throws -> HTTPConnectTunnel.Outcome {
        var parser = HTTPConnectTunnel.makeParser()
        let bytes = Array(text.utf8)
        let size = max(1, (bytes.count + pieces - 1) / pieces)
        var outcome = HTTPConnectTunnel.Outcome.needMore
        var start = 0
        while start < bytes.count {
            let chunk = Array(bytes[start..<min(bytes.count, start + size)])
            outcome = try chunk.withUnsafeBytes { raw throws(WireError) in try HTTPConnectTunnel.read(raw, parser: &parser) }
            start += size
        }
        return outcome
    }

    @Test func encodesAuthorityFormWithProxyCredentialsOnly() throws {
        let bytes = try HTTPConnectTunnel.request(
            authority: "[::1]:443", proxyAuthorization: "Basic YTpi", userAgent: "DownloadKit/0.1")
        #expect(String(decoding: bytes, as: UTF8.self) == "CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\nProxy-Authorization: Basic YTpi\r\nUser-Agent: DownloadKit/0.1\r\nProxy-Connection: Keep-Alive\r\n\r\n")
        #expect(throws: WireError.self) {
            try HTTPConnectTunnel.request(authority: "a:1 HTTP/1.1\r\nX: y", proxyAuthorization: nil, userAgent: "u")
        }
        #expect(throws: WireError.self) { try HTTPConnectTunnel.request(authority: "a:1", proxyAuthorization: "x\r\ny", userAgent: "u") }
    }

    @Test func establishedRefusedAndSplitAnswers() throws {
        guard case .established(let head, let consumed) = try read("HTTP/1.1 200 Connection established\r\n\r\n") else {
            Issue.record("not established")
            return
        }
        #expect(head.status == 200 && consumed == 39)
        guard case .established = try read("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\nX: y\r\n\r\n", in: 7) else {
            Issue.record("split answer with an interim head not established")
            return
        }
        guard case .refused(let refused) = try read("HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"corp proxy\"\r\nContent-Length: 5\r\n\r\ndeny!")
        else {
            Issue.record("407 not refused")
            return
        }
        #expect(refused.status == 407)
        #expect(refused.headers.first(name: "Proxy-Authenticate").flatMap(HTTPConnectTunnel.realm(ofChallenge:)) == "corp proxy")
        #expect(HTTPConnectTunnel.realm(ofChallenge: "Digest REALM=lab, nonce=\"x\"") == "lab")
        #expect(HTTPConnectTunnel.realm(ofChallenge: "Basic") == nil)
        #expect(try read("HTTP/1.1 200 OK\r\n") == .needMore)
    }

    @Test func bytesAfterTheAnswerOrAMalformedAnswerAreViolations() {
        do {
            _ = try read("HTTP/1.1 200 OK\r\n\r\ngarbage")
            Issue.record("garbage accepted")
        } catch let error as WireError {
            #expect(error.code == .unexpectedBytesAfterConnect)
        } catch {
            Issue.record("unexpected \(error)")
        }
        #expect(throws: WireError.self) { try read("SSH-2.0-OpenSSH\r\n\r\n") }
    }
}
