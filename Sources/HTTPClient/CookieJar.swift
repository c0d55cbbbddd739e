internal import CDownloadKitSystem
import Glibc
import HTTPWire

/// A failure to read or write a cookie or netrc file, naming the file and the cause.
public struct AuthFileError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The file.
    public var path: String
    /// The error number when a system call failed.
    public var errorNumber: DKErrno?
    /// The cause in plain words (the format error with its line, or the system error).
    public var detail: String

    /// ``errorNumber``'s raw C value.
    @available(*, deprecated, renamed: "errorNumber")
    public var errno: Int32? {
        get { errorNumber?.rawValue }
        set { errorNumber = newValue.map(DKErrno.init(rawValue:)) }
    }

    public var description: String { "\(path): \(detail)" }
}

/// The cookies of an ``DKHTTPClient``: consulted by every exchange, which adds the matching `Cookie`
/// field (RFC 6265 §5.4) and stores every `Set-Cookie` of every response (§5.3), redirects and
/// `401`s included. A cookie set by one host is never sent to another host (`127.0.0.1` and
/// `localhost` are different hosts), and a `Secure` one never over `http`.
///
/// With ``persistencePath`` set, every change is written to that Netscape-format file at once
/// (temporary file, `fsync`, rename; mode 0600), so a killed process keeps what it received.
///
/// `Sendable`: the store is behind one `LockedValue`. Equality is identity.
public final class CookieJar: Sendable, Hashable {
    private struct State {
        var store: CookieStore
        /// Bumped on every change, so a slower writer never replaces a newer file with an older snapshot.
        var generation = 0
    }

    private let state: LockedValue<State>
    /// The generation last written; held while writing, so file writes are serialised.
    private let written = LockedValue(-1)
    /// Where changes are saved, if anywhere (the CLI's `--cookie-jar FILE`).
    public let persistencePath: String?
    /// The clock, in seconds since 1970 (replaceable in tests).
    private let now: @Sendable () -> Int64

    /// Creates a jar holding `cookies`.
    /// - Parameters:
    ///   - cookies: Initial cookies (for example from ``load(path:)``).
    ///   - persistencePath: A file to save to after every change, or `nil`.
    ///   - now: The clock.
    public init(
        cookies: [Cookie] = [], persistencePath: String? = nil,
        now: @escaping @Sendable () -> Int64 = { Int64(time(nil)) }
    ) {
        self.state = LockedValue(State(store: CookieStore(cookies: cookies)))
        self.persistencePath = persistencePath
        self.now = now
    }

    /// Reads a Netscape cookie file (as written by curl `-c`, wget `--save-cookies`, browser exporters).
    /// - Throws: ``AuthFileError`` when the file cannot be read or a line is malformed (the line is named).
    public static func load(path: String) throws(AuthFileError) -> [Cookie] {
        let text = try readFile(path)
        do {
            return try NetscapeCookieFile.parse(text)
        } catch {
            throw AuthFileError(path: path, errorNumber: nil, detail: error.description)
        }
    }

    /// The cookies now held, oldest first.
    public var cookies: [Cookie] { state.withLock { $0.store.cookies } }

    /// The `Cookie` value for a request to `url`, or `nil`.
    public func cookieHeader(for url: HTTPURL) -> String? {
        let now = self.now()
        return state.withLock { $0.store.cookieHeader(for: url, now: now) }
    }

    /// Stores every `Set-Cookie` of `head`, received for `url`, and saves the jar if it changed.
    public func receive(_ head: ResponseHead, from url: HTTPURL) {
        let values = head.headers["Set-Cookie"]
        guard !values.isEmpty else { return }
        let now = self.now()
        let changed = state.withLock { state in
            var changed = false
            for value in values where state.store.receive(value, from: url, now: now) { changed = true }
            if changed { state.generation += 1 }
            return changed
        }
        if changed, persistencePath != nil { try? save() }
    }

    /// Writes the unexpired cookies to ``persistencePath`` (no-op without one).
    /// - Throws: ``AuthFileError``.
    public func save() throws(AuthFileError) {
        guard let persistencePath else { return }
        try save(to: persistencePath)
    }

    /// Writes the unexpired cookies to `path` in the Netscape format, mode 0600, atomically.
    /// - Throws: ``AuthFileError``.
    public func save(to path: String) throws(AuthFileError) {
        let now = self.now()
        // Snapshot under the state lock (short); write under the writer lock, newest snapshot only.
        let (cookies, generation) = state.withLock { state in
            state.store.removeExpired(now: now)
            return (state.store.cookies, state.generation)
        }
        try written.withLock { (last: inout Int) throws(AuthFileError) in
            guard generation > last || path != persistencePath else { return }
            try Self.writeFile(path, NetscapeCookieFile.serialize(cookies))
            if path == persistencePath { last = generation }
        }
    }

    static func readFile(_ path: String) throws(AuthFileError) -> String {
        func failure(_ what: String, _ error: SystemCallError) -> AuthFileError {
            AuthFileError(path: path, errorNumber: error.errno, detail: "\(what): \(error.errno)")
        }
        let fd: Int32
        do {
            fd = try retryingEINTR("open") { open(path, O_RDONLY | O_CLOEXEC) }
        } catch {
            throw failure("cannot open", error)
        }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count: Int
            do {
                count = try retryingEINTR("read") { chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) } }
            } catch {
                throw failure("cannot read", error)
            }
            if count == 0 { break }
            bytes += chunk[0..<count]
            if bytes.count > 64 << 20 {
                throw AuthFileError(path: path, errorNumber: nil, detail: "larger than 64 MiB; not a cookie file")
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Writes the jar through a temporary name beside it, created exclusively (`dk_create_temporary`, the
    /// project's one primitive for files beside a destination; issue #44): a file or symbolic link another
    /// user planted at `<jar>.tmp-<pid>` is never opened or truncated, a unique name is used instead.
    /// The rename replaces the jar's name itself (never a link's target).
    private static func writeFile(_ path: String, _ text: String) throws(AuthFileError) {
        func failure(_ what: String) -> AuthFileError {
            let code = DKErrno.current
            return AuthFileError(path: path, errorNumber: code, detail: "\(what): \(code)")
        }
        var name = [CChar](repeating: 0, count: Int(PATH_MAX) + 64)
        let fd = dk_create_temporary(path + ".tmp-", 0o600, &name, name.count)
        guard fd >= 0 else { throw failure("cannot create \(path).tmp-\(getpid())") }
        let temporary = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var ok = fchmod(fd, 0o600) == 0
        let bytes = Array(text.utf8)
        var written = 0
        while ok && written < bytes.count {
            let (count, _) = retryingInterrupts { bytes[written...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
            if count <= 0 { ok = false } else { written += count }
        }
        if ok { ok = fsync(fd) == 0 }
        let error = ok ? nil : failure("cannot write \(temporary)")
        close(fd)
        if let error {
            unlink(temporary)
            throw error
        }
        guard rename(temporary, path) == 0 else {
            let error = failure("cannot rename \(temporary) into place")
            unlink(temporary)
            throw error
        }
    }

    public static func == (lhs: CookieJar, rhs: CookieJar) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
