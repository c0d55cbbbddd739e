import Testing

@testable import HTTPWire

@Suite struct HTTPURLTests {
    struct Parsed: Sendable, CustomTestStringConvertible {
        var input: String
        var scheme: HTTPURL.Scheme
        var host: String
        var port: Int?
        var path: String
        var query: String?
        var requestTarget: String
        var hostHeader: String
        var testDescription: String { input }
    }

    static let valid: [Parsed] = [
        Parsed(input: "http://example.com", scheme: .http, host: "example.com", port: nil, path: "/", query: nil,
            requestTarget: "/", hostHeader: "example.com"),
        Parsed(input: "HTTPS://EXAMPLE.com:8443/a/b.tar.gz?x=1&y=%20#frag", scheme: .https, host: "example.com",
            port: 8443, path: "/a/b.tar.gz", query: "x=1&y=%20", requestTarget: "/a/b.tar.gz?x=1&y=%20",
            hostHeader: "example.com:8443"),
        Parsed(input: "http://example.com:80/", scheme: .http, host: "example.com", port: 80, path: "/", query: nil,
            requestTarget: "/", hostHeader: "example.com"),
        Parsed(input: "https://example.com:80/", scheme: .https, host: "example.com", port: 80, path: "/", query: nil,
            requestTarget: "/", hostHeader: "example.com:80"),
        Parsed(input: "http://h:/x", scheme: .http, host: "h", port: nil, path: "/x", query: nil,
            requestTarget: "/x", hostHeader: "h"),
        Parsed(input: "http://[::1]:8080/x", scheme: .http, host: "::1", port: 8080, path: "/x", query: nil,
            requestTarget: "/x", hostHeader: "[::1]:8080"),
        Parsed(input: "http://[FE80::1%25eth0]/", scheme: .http, host: "fe80::1%eth0", port: nil, path: "/",
            query: nil, requestTarget: "/", hostHeader: "[fe80::1]"),
        Parsed(input: "http://[::ffff:192.0.2.1]/", scheme: .http, host: "::ffff:192.0.2.1", port: nil, path: "/",
            query: nil, requestTarget: "/", hostHeader: "[::ffff:192.0.2.1]"),
        Parsed(input: "http://ex%41mple.COM/", scheme: .http, host: "example.com", port: nil, path: "/", query: nil,
            requestTarget: "/", hostHeader: "example.com"),
        Parsed(input: "http://h/a%2Fb/%7efile;p?q=%zz", scheme: .http, host: "h", port: nil, path: "/a%2Fb/%7efile;p",
            query: "q=%zz", requestTarget: "/a%2Fb/%7efile;p?q=%zz", hostHeader: "h"),
        Parsed(input: "http://h/caf\u{E9}?q=\u{E9}", scheme: .http, host: "h", port: nil, path: "/caf\u{E9}",
            query: "q=\u{E9}", requestTarget: "/caf%C3%A9?q=%C3%A9", hostHeader: "h"),
        Parsed(input: "http://h/a/./b/../c/", scheme: .http, host: "h", port: nil, path: "/a/c/", query: nil,
            requestTarget: "/a/c/", hostHeader: "h"),
        Parsed(input: "http://h?", scheme: .http, host: "h", port: nil, path: "/", query: "", requestTarget: "/?",
            hostHeader: "h"),
        Parsed(input: "http://192.168.0.1:65535", scheme: .http, host: "192.168.0.1", port: 65535, path: "/",
            query: nil, requestTarget: "/", hostHeader: "192.168.0.1:65535"),
    ]

    @Test(arguments: valid)
    func parsesValidURLs(_ expected: Parsed) throws {
        let url = try HTTPURL(expected.input)
        #expect(url.scheme == expected.scheme)
        #expect(url.host == expected.host)
        #expect(url.port == expected.port)
        #expect(url.effectivePort == expected.port ?? expected.scheme.defaultPort)
        #expect(url.path == expected.path)
        #expect(url.query == expected.query)
        #expect(url.requestTarget == expected.requestTarget)
        #expect(url.hostHeaderValue == expected.hostHeader)
        #expect(try HTTPURL(url.absoluteString) == url)
    }

    static let invalid: [(String, WireError.Code)] = [
        ("ftp://example.com/file", .unsupportedScheme),
        ("file:///etc/passwd", .unsupportedScheme),
        ("javascript:alert(1)", .unsupportedScheme),
        ("example.com/x", .malformedURL),
        ("/relative/path", .malformedURL),
        ("1http://h/", .malformedURL),
        ("http:example.com", .malformedURL),
        ("http://h/a b", .malformedURL),
        ("http://h/a\r\nX-Injected: 1", .malformedURL),
        ("http://h/a\nb", .malformedURL),
        ("http://h/\0", .malformedURL),
        ("http://h/\t", .malformedURL),
        ("http://h/\u{7F}", .malformedURL),
        (" http://h/", .malformedURL),
        ("http://us%zzer@h/", .malformedURL),
        ("http:///path", .invalidURLHost),
        ("http://user:pw@/x", .invalidURLHost),
        ("http://:80/", .invalidURLHost),
        ("http://ex%00ample.com/", .invalidURLHost),
        ("http://ex%2Fample.com/", .invalidURLHost),
        ("http://ex%2", .invalidURLHost),
        ("http://b\u{FC}cher.de/", .invalidURLHost),
        ("http://a<b/", .invalidURLHost),
        ("http://[::1/", .invalidURLHost),
        ("http://[zz::1]/", .invalidURLHost),
        ("http://[1]/", .invalidURLHost),
        ("http://[::1]x/", .invalidURLHost),
        ("http://[fe80::1%eth0]/", .invalidURLHost),
        ("http://[fe80::1%25]/", .invalidURLHost),
        ("http://[v1.fe]/", .invalidURLHost),
        ("http://h:0/", .invalidPort),
        ("http://h:65536/", .invalidPort),
        ("http://h:8a/", .invalidPort),
        ("http://h:-1/", .invalidPort),
        ("http://h:99999999999999999999999/", .invalidPort),
        ("http://[::1]:x/", .invalidPort),
    ]

    @Test(arguments: invalid)
    func rejectsInvalidURLs(_ input: String, _ code: WireError.Code) {
        #expect {
            try HTTPURL(input)
        } throws: { error in
            (error as? WireError)?.code == code
        }
    }

    @Test(arguments: [
        ("http://h:8a/", 9), ("http://ex%00ample.com/", 9), ("http://u:p@ex%zz/", 13), ("http://u:%zz@h/", 9),
        ("http://h/a\r\n", 10), ("http://[fe80::1%eth0]/", 15),
    ])
    func errorsCarryTheOffsetOfTheOffendingByte(_ input: String, _ offset: Int) {
        #expect {
            try HTTPURL(input)
        } throws: { error in
            (error as? WireError)?.offset == offset
        }
    }

    @Test func userinfoIsDecodedMaskedAndTurnedIntoBasicAuthorization() throws {
        // RFC 7617 §2 example credentials.
        let url = try HTTPURL("http://Aladdin:open%20sesame@example.com/f")
        #expect(url.user == "Aladdin")
        #expect(url.password == "open sesame")
        #expect(url.basicAuthorization == "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")
        #expect(url.description == "http://Aladdin:***@example.com/f")
        #expect(url.absoluteString == "http://Aladdin:open%20sesame@example.com/f")
        #expect(url.withoutUserinfo.absoluteString == "http://example.com/f")
        #expect(url.withoutUserinfo.basicAuthorization == nil)
        #expect(url.requestTarget == "/f")
    }

    @Test func lastAtSignEndsUserinfoAndColonInPasswordIsReencoded() throws {
        let url = try HTTPURL("https://me:p@ss:w@host/")
        #expect(url.user == "me")
        #expect(url.password == "p@ss:w")
        #expect(url.host == "host")
        #expect(url.absoluteString == "https://me:p%40ss%3Aw@host/")
        #expect(try HTTPURL(url.absoluteString) == url)
    }

    @Test func fragmentIsKeptButNeverInTheRequestTarget() throws {
        let url = try HTTPURL("http://h/p?q#frag")
        #expect(url.fragment == "frag")
        #expect(url.requestTarget == "/p?q")
        #expect(url.absoluteString == "http://h/p?q#frag")
    }

    @Test func originUsesEffectivePortAndBracketsIPv6() throws {
        #expect(try HTTPURL("https://Example.COM/x").origin.description == "https://example.com:443")
        #expect(try HTTPURL("http://[::1]:8080/").origin.description == "http://[::1]:8080")
        #expect(try HTTPURL("http://[fe80::1%25eth0]/").origin.description == "http://[fe80::1%25eth0]:80")
        #expect(try HTTPURL("http://h/").origin == HTTPURL("http://h:80/other").origin)
        #expect(try HTTPURL("http://h/").origin != HTTPURL("https://h/").origin)
        #expect(Origin(scheme: .http, host: "EXAMPLE.com", port: 80).host == "example.com")
    }

    @Test func ipAddressLiteralsAreRecognised() throws {
        #expect(try HTTPURL("http://10.0.0.1/").isIPAddressLiteral)
        #expect(try HTTPURL("http://[::1]/").isIPAddressLiteral)
        #expect(try !HTTPURL("http://10.0.0.256/").isIPAddressLiteral)
        #expect(try !HTTPURL("http://example.com/").isIPAddressLiteral)
        #expect(try !HTTPURL("http://1.2.3/").isIPAddressLiteral)
    }

    @Test(arguments: [
        ("http://h/dir/file%20name.tar.gz", "file name.tar.gz", "gz"),
        ("http://h/dir/", "dir", nil),
        ("http://h/.bashrc", ".bashrc", nil),
        ("http://h/file.", "file.", nil),
        ("http://h/a/%E2%82%AC.txt?x=y.zip", "\u{20AC}.txt", "txt"),
        ("http://h/..%2F..%2Fetc%2Fpasswd", "../../etc/passwd", nil),
        ("http://h/100%", "100%", nil),
    ] as [(String, String?, String?)])
    func lastPathSegmentIsDecodedButNotSanitised(_ input: String, _ segment: String?, _ pathExtension: String?) throws {
        let url = try HTTPURL(input)
        #expect(url.lastPathSegment == segment)
        #expect(url.pathExtension == pathExtension)
    }

    @Test func rootHasNoLastPathSegment() throws {
        let url = try HTTPURL("http://h")
        #expect(url.lastPathSegment == nil)
        #expect(url.pathExtension == nil)
    }
}

/// RFC 3986 §5.4: every normal and abnormal example, against the base `http://a/b/c/d;p?q`.
@Suite struct HTTPURLResolutionTests {
    static let base = "http://a/b/c/d;p?q"

    static let normal: [(String, String)] = [
        ("g", "http://a/b/c/g"),
        ("./g", "http://a/b/c/g"),
        ("g/", "http://a/b/c/g/"),
        ("/g", "http://a/g"),
        ("//g", "http://g/"),  // RFC: "http://g"; an http URL's empty path is "/" here
        ("?y", "http://a/b/c/d;p?y"),
        ("g?y", "http://a/b/c/g?y"),
        ("#s", "http://a/b/c/d;p?q#s"),
        ("g#s", "http://a/b/c/g#s"),
        ("g?y#s", "http://a/b/c/g?y#s"),
        (";x", "http://a/b/c/;x"),
        ("g;x", "http://a/b/c/g;x"),
        ("g;x?y#s", "http://a/b/c/g;x?y#s"),
        ("", "http://a/b/c/d;p?q"),
        (".", "http://a/b/c/"),
        ("./", "http://a/b/c/"),
        ("..", "http://a/b/"),
        ("../", "http://a/b/"),
        ("../g", "http://a/b/g"),
        ("../..", "http://a/"),
        ("../../", "http://a/"),
        ("../../g", "http://a/g"),
    ]

    static let abnormal: [(String, String)] = [
        ("../../../g", "http://a/g"),
        ("../../../../g", "http://a/g"),
        ("/./g", "http://a/g"),
        ("/../g", "http://a/g"),
        ("g.", "http://a/b/c/g."),
        (".g", "http://a/b/c/.g"),
        ("g..", "http://a/b/c/g.."),
        ("..g", "http://a/b/c/..g"),
        ("./../g", "http://a/b/g"),
        ("./g/.", "http://a/b/c/g/"),
        ("g/./h", "http://a/b/c/g/h"),
        ("g/../h", "http://a/b/c/h"),
        ("g;x=1/./y", "http://a/b/c/g;x=1/y"),
        ("g;x=1/../y", "http://a/b/c/y"),
        ("g?y/./x", "http://a/b/c/g?y/./x"),
        ("g?y/../x", "http://a/b/c/g?y/../x"),
        ("g#s/./x", "http://a/b/c/g#s/./x"),
        ("g#s/../x", "http://a/b/c/g#s/../x"),
        ("http:g", "http://a/b/c/g"),  // the backward-compatible reading §5.2.2 allows
    ]

    static let redirects: [(String, String)] = [
        ("https://other.example/x", "https://other.example/x"),
        ("HTTP://A/./b/../c", "http://a/c"),
        ("//cdn.example:8080/f?sig=1", "http://cdn.example:8080/f?sig=1"),
        ("/file name.zip", "http://a/file%20name.zip"),
        ("g?a=b c", "http://a/b/c/g?a=b%20c"),
        ("/caf\u{E9}", "http://a/caf\u{E9}"),
    ]

    @Test(arguments: normal + abnormal + redirects)
    func resolvesReference(_ reference: String, _ expected: String) throws {
        let resolved = try HTTPURL(Self.base).resolving(reference)
        #expect(resolved.absoluteString == expected)
        #expect(try HTTPURL(resolved.absoluteString) == resolved)
    }

    @Test func relativeReferenceKeepsUserinfoAndPort() throws {
        let base = try HTTPURL("https://u:p@h:8443/dir/file?q")
        let resolved = try base.resolving("other")
        #expect(resolved.absoluteString == "https://u:p@h:8443/dir/other")
    }

    static let refused: [(String, WireError.Code)] = [
        ("g:h", .unsupportedScheme),
        ("ftp://evil.example/x", .unsupportedScheme),
        ("file:///etc/passwd", .unsupportedScheme),
        ("javascript:alert(1)", .unsupportedScheme),
        ("data:text/plain,hi", .unsupportedScheme),
        ("/x\r\nSet-Cookie: a=b", .malformedURL),
        ("/x\0", .malformedURL),
        ("https:g", .malformedURL),
        ("//", .invalidURLHost),
        ("//h:99999/", .invalidPort),
    ]

    @Test(arguments: refused)
    func refusesUnsafeReferences(_ reference: String, _ code: WireError.Code) throws {
        let base = try HTTPURL(Self.base)
        #expect {
            try base.resolving(reference)
        } throws: { error in
            (error as? WireError)?.code == code
        }
    }

    @Test(arguments: [
        ("/a/b/c/./../../g", "/a/g"),
        ("mid/content=5/../6", "mid/6"),
        ("/..//x", "//x"),
        ("", ""),
        ("/", "/"),
        ("/.", "/"),
        ("/..", "/"),
        ("a/..", "/"),
    ])
    func removeDotSegmentsFollowsTheRFC(_ input: String, _ expected: String) {
        // The first two are the RFC 3986 §5.2.4 worked examples.
        #expect(String(decoding: HTTPURL.removeDotSegments(Array(input.utf8)[...]), as: UTF8.self) == expected)
    }
}
