// libFuzzer harness for cookies: the Netscape cookie file format and Set-Cookie with RFC 6265's storage
// rules (HTTPWire.NetscapeCookieFile, SetCookie, CookieStore).
//
// Compiled by Scripts/fuzz.sh into the one fuzz binary with Sources/HTTPWire/*.swift. The first
// byte picks the mode: even → the rest is a cookie file; odd → the rest is lines of Set-Cookie values
// received from a fixed URL. Properties: a parsed file written back parses to the same cookies; every
// cookie a server can set can be written to a file and read back; no cookie from one host is ever sent
// to another; a Cookie header never carries a control byte.

let cookieOrigin = try? HTTPURL("https://www.example.com:8443/dir/page")
let otherHost = try? HTTPURL("https://example.org:8443/dir/page")
let plainHTTP = try? HTTPURL("http://www.example.com:8443/dir/page")

func comparable(_ cookie: Cookie) -> [String] {
    [cookie.name, cookie.value, cookie.domain, cookie.path, "\(cookie.hostOnly)", "\(cookie.secure)",
     "\(cookie.httpOnly)", "\(cookie.expires.map { max(1, $0) } ?? 0)"]
}

func fuzzCookieFile(_ text: String) {
    guard let cookies = try? NetscapeCookieFile.parse(text) else { return }
    for cookie in cookies {
        check((cookie.name + cookie.value).utf8.allSatisfy { $0 >= 0x20 && $0 != 0x7F }, "control byte from a file")
    }
    let written = NetscapeCookieFile.serialize(cookies)
    guard let reread = try? NetscapeCookieFile.parse(written) else {
        check(false, "a written cookie file does not parse: \(written)")
        return
    }
    check(reread.map(comparable) == cookies.map(comparable), "cookie file round trip: \(written)")
}

func fuzzSetCookies(_ text: String) {
    guard let origin = cookieOrigin, let other = otherHost, let plain = plainHTTP else { return }
    var store = CookieStore()
    let now: Int64 = 1_700_000_000
    for line in text.split(separator: "\n") { store.receive(String(line), from: origin, now: now) }
    for cookie in store.cookies {
        check(cookie.domain == "www.example.com" || cookie.domain == "example.com", "foreign domain \(cookie.domain)")
        check(!cookie.name.isEmpty, "empty cookie name stored")
    }
    if let header = store.cookieHeader(for: origin, now: now) {
        check(header.utf8.allSatisfy { $0 >= 0x20 && $0 != 0x7F }, "control byte in Cookie: \(header)")
    }
    if let header = store.cookieHeader(for: other, now: now) { check(false, "sent to another host: \(header)") }
    check(store.cookies.filter(\.secure).allSatisfy { !$0.matches(plain, now: now) }, "a Secure cookie matches http")
    let written = NetscapeCookieFile.serialize(store.cookies)
    guard let reread = try? NetscapeCookieFile.parse(written) else {
        check(false, "stored cookies do not survive a cookie file: \(written)")
        return
    }
    check(reread.map(comparable) == store.cookies.map(comparable), "stored cookies round trip: \(written)")
}

/// One input (Fuzz/FuzzMain.swift calls it when the binary runs as `fuzz-cookies`).
func fuzzCookies(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 1 else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data + 1, count: size - 1), as: UTF8.self)
    if data[0] % 2 == 0 { fuzzCookieFile(text) } else { fuzzSetCookies(text) }
    return 0
}
