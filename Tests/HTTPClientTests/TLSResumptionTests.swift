import Foundation
import Glibc
import HTTPWire
import TestOrigin
import Testing
import TestThreads

@testable import HTTPClient

/// TLS session resumption (issue #47, item 7), seen by the server: nginx logs `$ssl_session_reused`.
@Suite(.serialized, .offPool) struct TLSResumptionTests {
    let certificates: TestCertificates
    let root: String
    let nginx: NginxServer
    let port: Int

    init() throws {
        certificates = try sharedTestCertificates.get()
        root = NSTemporaryDirectory() + "downloadkit-resumption-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try Data("resumed or not\n".utf8).write(to: URL(fileURLWithPath: root + "/small.txt"))
        let site = TLSSite(
            name: "localhost", certificatePath: certificates.valid.certificatePath,
            privateKeyPath: certificates.valid.privateKeyPath)
        nginx = try NginxServer(configuration: NginxConfiguration(documentRoot: root, tlsSites: [site]))
        port = try #require(nginx.tlsPorts["localhost"])
    }

    /// A TLS configuration trusting only the test CA.
    func configuration(_ configure: (inout DKTLSConfiguration) -> Void = { _ in }) -> DKTLSConfiguration {
        var tls = DKTLSConfiguration.makeClientConfiguration()
        tls.useSystemTrustRoots = false
        tls.additionalTrustRootFiles = [certificates.caCertificatePath]
        configure(&tls)
        return tls
    }

    func client(_ tls: DKTLSConfiguration) throws -> DKHTTPClient {
        var configuration = DKHTTPClientConfiguration(tls: tls)
        configuration.proxy = .direct
        return try DKHTTPClient(configuration: configuration)
    }

    /// One GET of /small.txt on a new connection (the pool's idle ones are closed first).
    func fetchOnNewConnection(_ client: DKHTTPClient) throws {
        client.closeIdleConnections()
        let response = try fetch(client, "https://localhost:\(port)/small.txt")
        #expect(response.summary.head.status == 200)
        #expect(String(decoding: response.body, as: UTF8.self) == "resumed or not\n")
    }

    /// What nginx logged for the last `count` requests: whether each one's connection resumed a session.
    func reusedFlags(count: Int) throws -> [Bool] {
        let entries = try nginx.accessLog(waitingFor: count)
        #expect(entries.count == count)
        #expect(Set(entries.map(\.connection)).count == count, "each request on a connection of its own")
        return entries.map(\.tlsSessionReused)
    }

    func directConnection(_ context: TLSContext) throws -> Connection {
        try Connection.connect(
            host: "127.0.0.1", port: port, tls: context, serverName: "localhost", deadline: .after(seconds: 10))
    }

    @Test func laterConnectionsOfOneClientResumeTheSessionOverTLS13() throws {
        defer { cleanUp() }
        let client = try client(configuration())
        for _ in 0..<3 { try fetchOnNewConnection(client) }
        #expect(try reusedFlags(count: 3) == [false, true, true])
    }

    @Test func laterConnectionsResumeOverTLS12() throws {
        defer { cleanUp() }
        let client = try client(configuration { $0.maximumVersion = .tlsv12 })
        for _ in 0..<3 { try fetchOnNewConnection(client) }
        #expect(try reusedFlags(count: 3) == [false, true, true])
        #expect(try nginx.accessLog().allSatisfy { $0.tlsProtocol == "TLSv1.2" })
    }

    /// Sessions belong to the configuration they were made under: another client with other trust roots,
    /// or with a client certificate, makes a full handshake; so does a client that turned resumption off.
    @Test func anotherConfigurationOrIdentityNeverResumes() throws {
        defer { cleanUp() }
        let first = try client(configuration())
        try fetchOnNewConnection(first)
        // The same CA under another file name: trust roots differ as configuration, not in effect.
        let copy = root + "/ca-copy.pem"
        try FileManager.default.copyItem(atPath: certificates.caCertificatePath, toPath: copy)
        let otherRoots = try client(configuration { $0.additionalTrustRootFiles = [copy] })
        try fetchOnNewConnection(otherRoots)
        let identity = try client(configuration {
            $0.clientCertificate = ClientCertificate(
                certificatePath: certificates.valid.certificatePath, privateKeyPath: certificates.valid.privateKeyPath)
        })
        try fetchOnNewConnection(identity)
        let off = try client(configuration { $0.resumesSessions = false })
        try fetchOnNewConnection(off)
        try fetchOnNewConnection(off)
        try fetchOnNewConnection(first)
        #expect(try reusedFlags(count: 6) == [false, false, false, false, false, true])
    }

    /// A TLS 1.3 ticket is offered once: the handshake that uses it takes it out of the cache, and the
    /// tickets the server sends on the resumed connection replace it.
    @Test func aTLS13TicketIsUsedOnce() throws {
        defer { cleanUp() }
        let context = try TLSContext(configuration: configuration())
        let cache = try #require(context.sessionCache)
        let key = TLSSessionCache.Key(serverName: "localhost", port: port, proxy: nil)
        let first = try directConnection(context)
        #expect(!first.tlsSessionResumed)
        // TLS 1.3 tickets arrive after the handshake; a read (here the idle check's peek) takes them in.
        _ = try first.waitForReadable(deadline: .after(seconds: 2))
        #expect(!first.hasPendingInputOrEOF)
        let tickets = cache.count(for: key)
        #expect(tickets >= 1)
        first.close()

        let second = try directConnection(context)
        #expect(second.tlsSessionResumed)
        #expect(second.tlsVersion == "TLSv1.3")
        #expect(cache.count(for: key) == tickets - 1, "the ticket offered left the cache")
        _ = try second.waitForReadable(deadline: .after(seconds: 2))
        #expect(!second.hasPendingInputOrEOF)
        #expect(cache.count(for: key) >= tickets, "the resumed connection's new ticket was kept")
        second.close()
    }

    /// A TLS 1.2 session arrives inside the handshake, before the key pins are checked: a handshake that
    /// fails the pins keeps nothing. The same context with the right pin keeps its session.
    @Test func aSessionOfAHandshakeThatFailedItsPinsIsNeverKept() throws {
        defer { cleanUp() }
        let wrongPin = PublicKeyPin(sha256: [UInt8](repeating: 7, count: 32))
        let pinned = try TLSContext(configuration: configuration {
            $0.maximumVersion = .tlsv12
            $0.pinnedPublicKeys = [wrongPin]
        })
        let error = transportError { _ = try directConnection(pinned) }
        #expect(error?.code == .publicKeyPinMismatch)
        #expect(pinned.sessionCache?.keyCount == 0)

        let unpinned = try TLSContext(configuration: configuration { $0.maximumVersion = .tlsv12 })
        try directConnection(unpinned).close()
        #expect(unpinned.sessionCache?.keyCount == 1)
    }

    /// The bounds: a few sessions per key (oldest dropped), a few hundred keys (least recently used dropped).
    @Test func theCacheIsBoundedPerKeyAndByLeastRecentUse() throws {
        defer { cleanUp() }
        let context = try TLSContext(configuration: configuration { $0.maximumVersion = .tlsv12 })
        let source = try #require(context.sessionCache)
        let key = TLSSessionCache.Key(serverName: "LOCALHOST", port: port, proxy: nil)
        #expect(key == TLSSessionCache.Key(serverName: "localhost", port: port, proxy: nil))
        #expect(key != TLSSessionCache.Key(serverName: "localhost", port: port + 1, proxy: nil))
        let proxy = try ProxyURL("http://proxy.example:3128")
        #expect(key != TLSSessionCache.Key(serverName: "localhost", port: port, proxy: proxy))

        try directConnection(context).close()
        let session = try #require(source.take(for: key))
        #expect(!session.isSingleUse)
        #expect(source.count(for: key) == 1, "a TLS 1.2 session stays after it is offered")

        let small = TLSSessionCache(capacity: 2, sessionsPerKey: 1)
        let keys = (1...3).map { TLSSessionCache.Key(serverName: "host\($0)", port: 443, proxy: nil) }
        small.store(session, for: keys[0])
        small.store(session, for: keys[1])
        #expect(small.take(for: keys[0]) != nil)  // keys[0] is now the most recently used
        small.store(session, for: keys[2])
        #expect(small.keyCount == 2)
        #expect(small.count(for: keys[1]) == 0, "the least recently used key was dropped")
        #expect(small.count(for: keys[0]) == 1 && small.count(for: keys[2]) == 1)
    }

    /// Many threads connecting through one context at once: every handshake succeeds, later ones resume,
    /// and the cache stays within its bound for the one key (run under TSan by the project's sanitizer step).
    @Test func concurrentConnectionsShareOneCacheSafely() throws {
        defer { cleanUp() }
        let context = try TLSContext(configuration: configuration())
        let cache = try #require(context.sessionCache)
        let resumed = LockedBox(0)
        let failures = LockedBox<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<5 {
                do {
                    let connection = try directConnection(context)
                    if connection.tlsSessionResumed { resumed.withLock { $0 += 1 } }
                    // Take in the tickets, as a read would.
                    _ = try connection.waitForReadable(deadline: .after(seconds: 2))
                    _ = connection.hasPendingInputOrEOF
                    connection.close()
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
        }
        #expect(failures.withLock { $0 } == [])
        #expect(resumed.withLock { $0 } > 0)
        #expect(cache.count(for: TLSSessionCache.Key(serverName: "localhost", port: port, proxy: nil)) <= cache.sessionsPerKey)
    }

    func cleanUp() {
        nginx.stop()
        try? FileManager.default.removeItem(atPath: root)
    }
}
