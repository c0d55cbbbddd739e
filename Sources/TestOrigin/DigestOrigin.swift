import Foundation
import HTTPWire

/// A FaultOrigin route protected by HTTP Digest authentication (RFC 7616), verifying each answer with
/// its own MD5 and SHA-256 (independent of the client's OpenSSL digests).
///
/// Requests without a valid `Authorization` get `401` with a fresh nonce. A correct answer gets the
/// body. After ``staleAfter`` answers a nonce is declared stale: the next answer with it gets `401`
/// with `stale=true` and a new nonce, which a client must use without asking the user again.
///
/// ```swift
/// let digest = DigestOrigin(user: "ann", password: "pw", algorithm: "SHA-256", body: bytes)
/// origin.serve("/secret", digest.route)
/// ```
public final class DigestOrigin: @unchecked Sendable {
    /// The protection space.
    public let realm: String
    /// `MD5` or `SHA-256`.
    public let algorithm: String
    /// Uses a nonce may serve before it is answered with `stale=true`; `nil` for never.
    public let staleAfter: Int?
    private let user: String
    private let password: String
    private let body: [UInt8]
    private let lock = NSLock()
    private var nonces: [String: Int] = [:]
    private var nonceSerial = 0
    private var verified = 0
    private var staleSent = 0
    private var rejected = 0

    /// Creates the protected resource.
    public init(
        realm: String = "downloadkit@test", user: String, password: String, algorithm: String = "MD5",
        staleAfter: Int? = nil, body: [UInt8]
    ) {
        self.realm = realm
        self.user = user
        self.password = password
        self.algorithm = algorithm
        self.staleAfter = staleAfter
        self.body = body
    }

    /// Answers the server verified (correct user, realm, nonce, uri and response).
    public var verifiedCount: Int { lock.withLock { verified } }
    /// `401`s sent with `stale=true`.
    public var staleCount: Int { lock.withLock { staleSent } }
    /// Answers that were wrong (bad response, unknown nonce, wrong user or uri).
    public var rejectedCount: Int { lock.withLock { rejected } }

    /// The route to register with ``FaultOrigin/serve(_:_:)``.
    public var route: Route {
        .script { [self] request, connection in
            connection.keepsAlive = true
            switch check(request) {
            case .accepted:
                try connection.write(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: \(body.count)\r\n\r\n")
                try connection.write(body)
            case .challenge(let stale):
                let nonce = newNonce()
                var challenge = "Digest realm=\"\(realm)\", qop=\"auth\", algorithm=\(algorithm), nonce=\"\(nonce)\", "
                    + "opaque=\"opaque-\(realm.count)\""
                if stale { challenge += ", stale=true" }
                let page = "authentication required\n"
                try connection.write(
                    "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: \(challenge)\r\nContent-Type: text/plain\r\n"
                        + "Content-Length: \(page.utf8.count)\r\n\r\n\(page)")
            }
        }
    }

    private enum Outcome {
        case accepted
        case challenge(stale: Bool)
    }

    private func newNonce() -> String {
        lock.withLock {
            nonceSerial += 1
            let nonce = Base64.encode("nonce-\(nonceSerial)-\(UUID().uuidString)")
            nonces[nonce] = 0
            return nonce
        }
    }

    private func check(_ request: RecordedRequest) -> Outcome {
        guard let header = request.header("Authorization"),
            let challenge = try? AuthChallenge.parse(header).first, challenge.isScheme("Digest")
        else { return .challenge(stale: false) }
        func reject() -> Outcome {
            lock.withLock { rejected += 1 }
            return .challenge(stale: false)
        }
        guard let nonce = challenge.parameter("nonce"), let response = challenge.parameter("response"),
            let nc = challenge.parameter("nc"), let cnonce = challenge.parameter("cnonce"),
            challenge.parameter("qop") == "auth", challenge.parameter("username") == user,
            challenge.parameter("realm") == realm, challenge.parameter("uri") == request.target,
            challenge.parameter("algorithm")?.uppercased() == algorithm.uppercased()
        else { return reject() }
        let useSHA256 = algorithm.uppercased() == "SHA-256"
        func h(_ text: String) -> String {
            let bytes = Array(text.utf8)
            return SimpleHash.hex(useSHA256 ? SimpleHash.sha256(bytes) : SimpleHash.md5(bytes))
        }
        let ha1 = h(user + ":" + realm + ":" + password)
        let ha2 = h(request.method + ":" + request.target)
        let expected = h([ha1, nonce, nc, cnonce, "auth", ha2].joined(separator: ":"))
        guard response == expected else { return reject() }
        let uses: Int? = lock.withLock {
            guard let uses = nonces[nonce] else { return nil }
            nonces[nonce] = uses + 1
            return uses
        }
        guard let uses else { return reject() }
        if let staleAfter, uses >= staleAfter {
            lock.withLock { staleSent += 1 }
            return .challenge(stale: true)
        }
        lock.withLock { verified += 1 }
        return .accepted
    }
}

/// MD5 (RFC 1321) and SHA-256 (FIPS 180-4) in plain Swift, so the test origin checks Digest answers
/// without sharing code with the client under test. Not for anything but tests.
public enum SimpleHash {
    /// Lower-case hex.
    public static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    private static func padded(_ message: [UInt8], bigEndianLength: Bool) -> [UInt8] {
        var data = message
        let bitLength = UInt64(message.count) &* 8
        data.append(0x80)
        while data.count % 64 != 56 { data.append(0) }
        for index in 0..<8 {
            let shift = bigEndianLength ? UInt64(56 - index * 8) : UInt64(index * 8)
            data.append(UInt8(truncatingIfNeeded: bitLength >> shift))
        }
        return data
    }

    /// MD5 of `message`.
    public static func md5(_ message: [UInt8]) -> [UInt8] {
        let shifts: [UInt32] = [
            7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9,
            14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15,
            21, 6, 10, 15, 21,
        ]
        let constants: [UInt32] = (0..<64).map { UInt32(truncatingIfNeeded: Int64(abs(sin(Double($0 + 1))) * 4_294_967_296)) }
        var a0: UInt32 = 0x6745_2301
        var b0: UInt32 = 0xefcd_ab89
        var c0: UInt32 = 0x98ba_dcfe
        var d0: UInt32 = 0x1032_5476
        let data = padded(message, bigEndianLength: false)
        for chunk in stride(from: 0, to: data.count, by: 64) {
            let words: [UInt32] = (0..<16).map { index in
                let base = chunk + index * 4
                return UInt32(data[base]) | UInt32(data[base + 1]) << 8 | UInt32(data[base + 2]) << 16
                    | UInt32(data[base + 3]) << 24
            }
            var a = a0, b = b0, c = c0, d = d0
            for i in 0..<64 {
                var f: UInt32
                let g: Int
                switch i {
                case 0..<16:
                    f = (b & c) | (~b & d)
                    g = i
                case 16..<32:
                    f = (d & b) | (~d & c)
                    g = (5 * i + 1) % 16
                case 32..<48:
                    f = b ^ c ^ d
                    g = (3 * i + 5) % 16
                default:
                    f = c ^ (b | ~d)
                    g = (7 * i) % 16
                }
                f = f &+ a &+ constants[i] &+ words[g]
                a = d
                d = c
                c = b
                b = b &+ ((f << shifts[i]) | (f >> (32 - shifts[i])))
            }
            a0 = a0 &+ a
            b0 = b0 &+ b
            c0 = c0 &+ c
            d0 = d0 &+ d
        }
        return [a0, b0, c0, d0].flatMap { word in (0..<4).map { UInt8(truncatingIfNeeded: word >> (8 * $0)) } }
    }

    /// SHA-256 of `message`.
    public static func sha256(_ message: [UInt8]) -> [UInt8] {
        let k: [UInt32] = [
            0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
            0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
            0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
            0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
            0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
            0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
            0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
            0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
        ]
        var h: [UInt32] = [
            0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
        ]
        func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 { (x >> n) | (x << (32 - n)) }
        let data = padded(message, bigEndianLength: true)
        for chunk in stride(from: 0, to: data.count, by: 64) {
            var w = [UInt32](repeating: 0, count: 64)
            for i in 0..<16 {
                let base = chunk + i * 4
                w[i] = UInt32(data[base]) << 24 | UInt32(data[base + 1]) << 16 | UInt32(data[base + 2]) << 8
                    | UInt32(data[base + 3])
            }
            for i in 16..<64 {
                let s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3)
                let s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10)
                w[i] = w[i - 16] &+ s0 &+ w[i - 7] &+ s1
            }
            var a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7]
            for i in 0..<64 {
                let s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)
                let choice = (e & f) ^ (~e & g)
                let t1 = hh &+ s1 &+ choice &+ k[i] &+ w[i]
                let s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)
                let majority = (a & b) ^ (a & c) ^ (b & c)
                let t2 = s0 &+ majority
                hh = g
                g = f
                f = e
                e = d &+ t1
                d = c
                c = b
                b = a
                a = t1 &+ t2
            }
            for (index, value) in [a, b, c, d, e, f, g, hh].enumerated() { h[index] = h[index] &+ value }
        }
        return h.flatMap { word in (0..<4).map { UInt8(truncatingIfNeeded: word >> (24 - 8 * UInt32($0))) } }
    }
}
