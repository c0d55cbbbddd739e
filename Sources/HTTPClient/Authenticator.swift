import Glibc
import HTTPWire

/// A user name and password. `description` never shows the password.
public struct Credential: Sendable, Hashable, CustomStringConvertible {
    /// The user name.
    public var user: String
    /// The password.
    public var password: String

    /// Creates a credential.
    public init(user: String, password: String) {
        self.user = user
        self.password = password
    }

    /// Splits `user:password` at the first colon (curl's `--user`); without a colon the password is empty.
    public init(userColonPassword text: String) {
        if let colon = text.firstIndex(of: ":") {
            self.init(user: String(text[..<colon]), password: String(text[text.index(after: colon)...]))
        } else {
            self.init(user: text, password: "")
        }
    }

    public var description: String { "\(user):***" }
}

/// Answers `401` challenges (Basic, RFC 7617; Digest, RFC 7616 with MD5 or SHA-256, qop `auth`)
/// with credentials that belong to one origin, consulted by ``HTTPClient/execute(_:cancellation:buffer:onHead:onBody:onSpliced:)``
/// for every exchange and by `execute(series:…)` for every request of a series (segment workers'
/// range requests), with the same rule. Each client also keeps one for its HTTP proxies' URL
/// credentials, answering a proxy's Digest `407` the same way (bound to the proxy's host and port).
///
/// Rules, enforced here in one place:
/// - A credential bound to an origin (scheme, host, port) answers only that origin: never another
///   host or port, and never `http` when it was given for `https` (a redirect elsewhere gets nothing).
/// - A credential bound to a host only (``addHostCredential(_:forHost:)``, how netrc entries are
///   honoured when asked) answers that host over `https` only.
/// - Once an origin has accepted a scheme, later requests to it carry the answer up front (Basic, or
///   Digest with the next nonce count), so segments do not each pay a 401. A `stale=true` Digest
///   challenge is answered again with the new nonce.
/// - A request that already carries `Authorization` (from a header or URL userinfo) is left alone.
///
/// `Sendable`: all mutable state is behind one `LockedValue`. Equality is identity.
public final class Authenticator: Sendable, Hashable {
    private struct Binding: Sendable {
        enum Scope: Sendable {
            case origin(Origin)
            case host(String)
        }
        var scope: Scope
        var credential: Credential

        func applies(to origin: Origin) -> Bool {
            switch scope {
            case .origin(let bound): return bound == origin
            case .host(let host): return origin.host == host && origin.scheme == .https
            }
        }
    }

    /// What an origin accepted, reused for later requests.
    private enum Accepted: Sendable {
        case basic
        case digest(DigestChallenge, nonceCount: Int)
    }

    private struct State: Sendable {
        var bindings: [Binding] = []
        var accepted: [Origin: Accepted] = [:]
    }

    private let state = LockedValue(State())

    /// Creates an authenticator with no credentials.
    public init() {}

    /// Binds `credential` to the origin of `url` (its scheme, host and port).
    public func addCredential(_ credential: Credential, for url: HTTPURL) {
        addCredential(credential, for: url.origin)
    }

    /// Binds `credential` to `origin` (for a proxy: `http`, its host and port).
    func addCredential(_ credential: Credential, for origin: Origin) {
        state.withLock { $0.bindings.append(Binding(scope: .origin(origin), credential: credential)) }
    }

    /// Binds `credential` to `host` for `https` only, on any port.
    public func addHostCredential(_ credential: Credential, forHost host: String) {
        state.withLock { $0.bindings.append(Binding(scope: .host(host.lowercased()), credential: credential)) }
    }

    /// Binds the netrc entry for each URL's host (a `machine` entry, else `default`) to that URL's
    /// origin, as curl's `--netrc` does for the URLs on its command line.
    /// - Returns: The URLs for which an entry with a login was found.
    @discardableResult
    public func addNetrcCredentials(_ netrc: NetrcFile, for urls: [HTTPURL]) -> [HTTPURL] {
        var bound: [HTTPURL] = []
        for url in urls {
            guard let entry = netrc.entry(forHost: url.host, login: url.user), let login = entry.login else { continue }
            addCredential(Credential(user: login, password: entry.password ?? ""), for: url)
            bound.append(url)
        }
        return bound
    }

    /// Binds every `machine` entry of `netrc` (with a login) to its host, over `https` only; the
    /// `default` entry is not used, since it would answer any host.
    public func addNetrcHosts(_ netrc: NetrcFile) {
        for entry in netrc.entries {
            guard let machine = entry.machine, let login = entry.login else { continue }
            addHostCredential(Credential(user: login, password: entry.password ?? ""), forHost: machine)
        }
    }

    /// The credential that may be sent to `origin`, if any.
    public func credential(for origin: Origin) -> Credential? {
        state.withLock { state in state.bindings.first { $0.applies(to: origin) }?.credential }
    }

    /// The `Authorization` value to send up front to an origin that accepted credentials before.
    func preemptiveAuthorization(method: DKHTTPMethod, url: HTTPURL) -> String? {
        authorization(method: method.rawValue, uri: url.requestTarget, origin: url.origin)
    }

    /// The credentials `origin` accepted before, for a request with `method` and Digest `uri` (the
    /// request target as sent: origin form, absolute form through a proxy, `host:port` for CONNECT);
    /// a Digest answer takes the next nonce count.
    func authorization(method: String, uri: String, origin: Origin) -> String? {
        let found: (Credential, Accepted)? = state.withLock { state in
            guard let binding = state.bindings.first(where: { $0.applies(to: origin) }),
                let accepted = state.accepted[origin]
            else { return nil }
            switch accepted {
            case .basic:
                return (binding.credential, accepted)
            case .digest(let challenge, let count):
                state.accepted[origin] = .digest(challenge, nonceCount: count + 1)
                return (binding.credential, .digest(challenge, nonceCount: count + 1))
            }
        }
        guard let (credential, accepted) = found else { return nil }
        return Self.authorization(accepted, credential: credential, method: method, uri: uri)
    }

    /// Reads a `401` response's challenges and, when one can be answered for this origin, remembers
    /// it so the retried request carries credentials.
    /// - Returns: Whether the request should be sent again.
    func accept(challengeFrom head: ResponseHead, url: HTTPURL) -> Bool {
        guard head.status == 401 else { return false }
        return accept(challenges: head.headers["WWW-Authenticate"], origin: url.origin, basic: true)
    }

    /// Reads a proxy's `407` and, when it offers Digest (Basic is sent up front from the proxy URL, so a
    /// 407 to it means refused credentials), remembers the challenge for the proxy's `origin`.
    /// - Returns: Whether the request (or CONNECT) should be sent again with ``authorization(method:uri:origin:)``.
    func acceptProxyChallenge(from head: ResponseHead, proxy origin: Origin) -> Bool {
        guard head.status == 407 else { return false }
        return accept(challenges: head.headers["Proxy-Authenticate"], origin: origin, basic: false)
    }

    /// The one choice of scheme: the strongest offered challenge this origin has a credential for.
    private func accept(challenges values: [String], origin: Origin, basic: Bool) -> Bool {
        guard credential(for: origin) != nil else { return false }
        guard let challenges = try? AuthChallenge.parse(values) else { return false }
        // The strongest first: Digest with SHA-256, then Digest MD5, then Basic.
        let digests = challenges.filter { $0.isScheme("Digest") }.compactMap { try? DigestChallenge($0) }
        let chosen: Accepted?
        if let digest = digests.first(where: { $0.algorithm == .sha256 }) ?? digests.first {
            chosen = .digest(digest, nonceCount: 0)
        } else if basic, challenges.contains(where: { $0.isScheme("Basic") }) {
            chosen = .basic
        } else {
            chosen = nil
        }
        guard let chosen else { return false }
        state.withLock { $0.accepted[origin] = chosen }
        return true
    }

    private static func authorization(_ accepted: Accepted, credential: Credential, method: String, uri: String)
        -> String
    {
        switch accepted {
        case .basic:
            return "Basic " + Base64.encode(credential.user + ":" + credential.password)
        case .digest(let challenge, let count):
            let algorithm: DigestAlgorithm = challenge.algorithm == .sha256 ? .sha256 : .md5
            return challenge.authorization(
                user: credential.user, password: credential.password, method: method,
                uri: uri, cnonce: Self.clientNonce(), nonceCount: count,
                hash: { DKDigest.hex(DKDigest.hash(algorithm, Array($0.utf8))) })
        }
    }

    /// 16 random bytes as hex, from the system's CSPRNG.
    static func clientNonce() -> String {
        var generator = SystemRandomNumberGenerator()
        return DKDigest.hex((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    public static func == (lhs: Authenticator, rhs: Authenticator) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

extension NetrcFile {
    /// `$NETRC` when set, else `$HOME/.netrc` (curl's default).
    public static var defaultPath: String {
        if let path = getenv("NETRC").map({ String(cString: $0) }), !path.isEmpty { return path }
        let home = getenv("HOME").map { String(cString: $0) } ?? ""
        return home + "/.netrc"
    }

    /// Reads and parses a netrc file (the library's way to honour netrc when asked; pass the result to
    /// ``Authenticator/addNetrcCredentials(_:for:)`` or ``Authenticator/addNetrcHosts(_:)``).
    /// - Throws: ``AuthFileError`` naming the file and the read error or the format error with its offset.
    public static func load(path: String = NetrcFile.defaultPath) throws(AuthFileError) -> NetrcFile {
        let text = try CookieJar.readFile(path)
        do {
            return try NetrcFile(parsing: text)
        } catch {
            throw AuthFileError(path: path, errorNumber: nil, detail: error.description)
        }
    }
}
