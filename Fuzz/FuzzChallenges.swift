// libFuzzer harness for WWW-Authenticate challenges and Digest answers (HTTPWire.AuthChallenge,
// DigestChallenge).
//
// Compiled by Scripts/fuzz.sh into the one fuzz binary with Sources/HTTPWire/*.swift. The input is
// a WWW-Authenticate value. Properties: every scheme and parameter name is a non-empty token; a Digest
// answer never carries a control byte (no header injection from a hostile server), and parsing the
// answer gives back the server's realm, nonce and opaque exactly.

func isToken(_ text: String) -> Bool {
    !text.isEmpty && text.utf8.allSatisfy { byte in
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
            || Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
    }
}

/// One input (Fuzz/FuzzMain.swift calls it when the binary runs as `fuzz-challenges`).
func fuzzChallenges(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    guard let challenges = try? AuthChallenge.parse(text) else { return 0 }
    for challenge in challenges {
        check(isToken(challenge.scheme), "scheme \(challenge.scheme)")
        check(challenge.parameters.allSatisfy { isToken($0.name) }, "parameter names of \(challenge)")
        guard let digest = try? DigestChallenge(challenge) else { continue }
        for user in ["u", "ü \"q\"\\"] {
            let answer = digest.authorization(
                user: user, password: "p", method: "GET", uri: "/a?b", cnonce: "c", nonceCount: 1, hash: { "h\($0.utf8.count)" })
            check(answer.utf8.allSatisfy { $0 >= 0x20 && $0 != 0x7F || $0 == 0x09 } , "control byte in \(answer)")
            guard let parsed = try? AuthChallenge.parse(answer), parsed.count == 1, let echo = parsed.first else {
                check(false, "the Digest answer does not parse: \(answer)")
                continue
            }
            check(echo.parameter("realm") == digest.realm, "realm changed in \(answer)")
            check(echo.parameter("nonce") == digest.nonce, "nonce changed in \(answer)")
            check(echo.parameter("opaque") == digest.opaque, "opaque changed in \(answer)")
        }
    }
    return 0
}
