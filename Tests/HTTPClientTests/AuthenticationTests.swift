import Foundation
import Glibc
import HTTPWire
import TestOrigin
import Testing
import TestThreads

@testable import HTTPClient

/// Runs one GET through `client`, collecting the body.
private func authFetch(_ client: DKHTTPClient, _ url: String, headers: DKHTTPHeaders = DKHTTPHeaders()) throws -> (
    head: ResponseHead, body: [UInt8]
) {
    var body: [UInt8] = []
    let summary = try client.execute(
        DKHTTPRequest(url: try HTTPURL(url), headers: headers), onHead: { _ in .stream },
        onBody: { body += $0 })
    return (summary.head, body)
}

@Suite(.offPool) struct DigestAuthenticationTests {
    /// RFC 7616 §3.9.1: the same request answered with MD5 and with SHA-256.
    @Test(arguments: [
        ("MD5", "8ca523f5e9506fed4657c9700eebdbec", DigestAlgorithm.md5),
        ("SHA-256", "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1", DigestAlgorithm.sha256),
    ])
    func rfc7616Example(_ algorithm: String, _ response: String, _ digest: DigestAlgorithm) throws {
        let header = """
            Digest realm="http-auth@example.org", qop="auth, auth-int", algorithm=\(algorithm), \
            nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS"
            """
        let challenge = try DigestChallenge(try #require(try AuthChallenge.parse(header).first))
        let value = challenge.authorization(
            user: "Mufasa", password: "Circle of Life", method: "GET", uri: "/dir/index.html",
            cnonce: "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ", nonceCount: 1,
            hash: { DKDigest.hex(DKDigest.hash(digest, Array($0.utf8))) })
        #expect(value.contains("response=\"\(response)\""), "\(value)")
        #expect(value.contains("nc=00000001") && value.contains("qop=auth,"))
    }

    /// The test origin's own MD5 and SHA-256 agree with OpenSSL's.
    @Test func independentHashesAgreeWithOpenSSL() {
        for text in ["", "abc", String(repeating: "x", count: 1000)] {
            let bytes = Array(text.utf8)
            #expect(SimpleHash.md5(bytes) == DKDigest.hash(.md5, bytes))
            #expect(SimpleHash.sha256(bytes) == DKDigest.hash(.sha256, bytes))
        }
    }

    @Test(arguments: ["MD5", "SHA-256"])
    func digestChallengeIsAnsweredAndLaterRequestsGoUpFront(_ algorithm: String) throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let body = Array("digest-protected \(algorithm)\n".utf8)
        let digest = DigestOrigin(user: "ann", password: "s3cret", algorithm: algorithm, body: body)
        origin.serve("/secret", digest.route)
        let authenticator = Authenticator()
        authenticator.addCredential(Credential(user: "ann", password: "s3cret"), for: try HTTPURL(origin.url("/")))
        var configuration = DKHTTPClientConfiguration(connectTimeout: .seconds(5), idleTimeout: .seconds(5))
        configuration.authenticator = authenticator
        let client = try DKHTTPClient(configuration: configuration)

        let first = try authFetch(client, origin.url("/secret"))
        #expect(first.head.status == 200)
        #expect(first.body == body)
        #expect(digest.verifiedCount == 1)
        #expect(digest.rejectedCount == 0)
        let second = try authFetch(client, origin.url("/secret?again"))
        #expect(second.head.status == 200)
        let requests = origin.requests("/secret")
        // 401, answer, then the next request answered up front with nc=00000002.
        #expect(requests.count == 3)
        #expect(requests[0].header("Authorization") == nil)
        #expect(requests[2].header("Authorization")?.contains("nc=00000002") == true)
        #expect(requests[2].header("Authorization")?.contains("algorithm=\(algorithm)") == true)
        #expect(digest.verifiedCount == 2)
    }

    @Test func staleNonceIsRenewedWithoutFailing() throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let digest = DigestOrigin(user: "ann", password: "pw", algorithm: "SHA-256", staleAfter: 1, body: [1, 2, 3])
        origin.serve("/s", digest.route)
        let authenticator = Authenticator()
        authenticator.addCredential(Credential(user: "ann", password: "pw"), for: try HTTPURL(origin.url("/")))
        var configuration = DKHTTPClientConfiguration()
        configuration.authenticator = authenticator
        let client = try DKHTTPClient(configuration: configuration)
        #expect(try authFetch(client, origin.url("/s")).head.status == 200)
        // The nonce has served once; the up-front answer gets stale=true, answered with the new nonce.
        #expect(try authFetch(client, origin.url("/s")).head.status == 200)
        #expect(digest.staleCount == 1)
        #expect(digest.verifiedCount == 2)
        #expect(origin.requests("/s").count == 4)
    }

    @Test func wrongPasswordSurfacesTheSecond401() throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let digest = DigestOrigin(user: "ann", password: "right", body: [1])
        origin.serve("/s", digest.route)
        let authenticator = Authenticator()
        authenticator.addCredential(Credential(user: "ann", password: "wrong"), for: try HTTPURL(origin.url("/")))
        var configuration = DKHTTPClientConfiguration()
        configuration.authenticator = authenticator
        let response = try authFetch(try DKHTTPClient(configuration: configuration), origin.url("/s"))
        #expect(response.head.status == 401)
        #expect(origin.requests("/s").count == 2, "one answer, no loop")
        #expect(digest.rejectedCount == 1)
    }
}

@Suite(.offPool) struct CredentialScopeTests {
    func client(boundTo url: String) throws -> DKHTTPClient {
        let authenticator = Authenticator()
        authenticator.addCredential(Credential(user: "u", password: "p"), for: try HTTPURL(url))
        var configuration = DKHTTPClientConfiguration()
        configuration.authenticator = authenticator
        return try DKHTTPClient(configuration: configuration)
    }

    static let challenge: Route = .response(
        status: 401, headers: [("WWW-Authenticate", #"Basic realm="x""#)], body: Array("no\n".utf8))

    @Test func basicChallengeIsAnsweredForTheBoundOrigin() throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/b", .script { request, connection in
            connection.keepsAlive = true
            if request.header("Authorization") == "Basic dTpw" {
                try connection.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            } else {
                try connection.write("HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\n\r\n")
            }
        })
        let client = try client(boundTo: origin.url("/"))
        #expect(try authFetch(client, origin.url("/b")).body == Array("ok".utf8))
        #expect(try authFetch(client, origin.url("/b")).body == Array("ok".utf8))
        #expect(origin.requests("/b").map { $0.header("Authorization") } == [nil, "Basic dTpw", "Basic dTpw"])
    }

    @Test func anotherHostGetsNoCredentials() throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/b", Self.challenge)
        // Bound to 127.0.0.1; asked by localhost (same port, another origin).
        let client = try client(boundTo: origin.url("/"))
        let response = try authFetch(client, "http://localhost:\(origin.port)/b")
        #expect(response.head.status == 401)
        #expect(origin.requests("/b").count == 1)
        #expect(origin.requests("/b").allSatisfy { $0.header("Authorization") == nil })
    }

    @Test func credentialsForHTTPSAreNeverSentOverHTTP() throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/b", Self.challenge)
        let client = try client(boundTo: "https://127.0.0.1:\(origin.port)/")
        #expect(try authFetch(client, origin.url("/b")).head.status == 401)
        #expect(origin.requests("/b").allSatisfy { $0.header("Authorization") == nil })
        // A host-bound (netrc) credential is for https only, too.
        let authenticator = Authenticator()
        authenticator.addNetrcHosts(try NetrcFile(parsing: "machine 127.0.0.1 login u password p"))
        #expect(authenticator.credential(for: Origin(scheme: .http, host: "127.0.0.1", port: origin.port)) == nil)
        #expect(authenticator.credential(for: Origin(scheme: .https, host: "127.0.0.1", port: 8443)) != nil)
    }

    @Test func explicitAuthorizationHeaderIsLeftAlone() throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/b", Self.challenge)
        let client = try client(boundTo: origin.url("/"))
        let response = try authFetch(client, origin.url("/b"), headers: ["Authorization": "Bearer t"])
        #expect(response.head.status == 401)
        #expect(origin.requests("/b").map { $0.header("Authorization") } == ["Bearer t"])
    }

    @Test func netrcEntriesBindToTheURLsOrigins() throws {
        let netrc = try NetrcFile(parsing: "machine 127.0.0.1 login a password b\ndefault login d password e")
        let authenticator = Authenticator()
        let bound = authenticator.addNetrcCredentials(
            netrc, for: [try HTTPURL("http://127.0.0.1:81/x"), try HTTPURL("http://localhost:82/")])
        #expect(bound.count == 2)
        #expect(authenticator.credential(for: Origin(scheme: .http, host: "127.0.0.1", port: 81))?.user == "a")
        #expect(authenticator.credential(for: Origin(scheme: .http, host: "localhost", port: 82))?.user == "d")
        #expect(authenticator.credential(for: Origin(scheme: .http, host: "127.0.0.1", port: 82)) == nil)
        #expect(Credential(user: "a", password: "b").description == "a:***")
    }
}

@Suite(.offPool) struct CookieJarClientTests {
    @Test func cookiesFlowThroughTheClientAndStayOnTheirHost() throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let gate = CookieGate()
        origin.serve("/login", gate.login(redirectTo: "/file"))
        origin.serve("/file", gate.protected(body: Array("members only\n".utf8)))
        let dir = try ScratchDirectory()
        let jar = CookieJar(persistencePath: dir.file("jar.txt"))
        var configuration = DKHTTPClientConfiguration()
        configuration.cookieJar = jar
        let client = try DKHTTPClient(configuration: configuration)
        #expect(try authFetch(client, origin.url("/login")).head.status == 302)
        #expect(try authFetch(client, origin.url("/file")).head.status == 200)
        #expect(try authFetch(client, "http://localhost:\(origin.port)/file").head.status == 403)
        let sent = origin.requests("/file").map { $0.header("Cookie") }
        #expect(sent == ["\(gate.name)=\(gate.value)", nil])

        // Saved as it arrived, private to the user, and readable again.
        var info = stat()
        #expect(stat(dir.file("jar.txt"), &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        let loaded = try CookieJar.load(path: dir.file("jar.txt"))
        #expect(loaded.map(\.name) == [gate.name])
        #expect(loaded.first?.hostOnly == true && loaded.first?.domain == "127.0.0.1")
    }

    @Test func unreadableOrMalformedCookieFilesAreNamed() throws {
        let dir = try ScratchDirectory()
        #expect(throws: AuthFileError.self) { try CookieJar.load(path: dir.file("missing")) }
        try "x\tTRUE\n".write(toFile: dir.file("bad"), atomically: true, encoding: .utf8)
        do {
            _ = try CookieJar.load(path: dir.file("bad"))
            Issue.record("accepted a malformed file")
        } catch {
            #expect(error.description.contains("line 1"))
        }
    }
}

/// Client certificates are loaded (and refused) when the context is built; pins are checked after
/// the handshake.
@Suite(.serialized, .offPool) struct ClientIdentityTests {
    let certificates: TestCertificates
    let clients: ClientCertificates

    init() throws {
        certificates = try sharedTestCertificates.get()
        clients = try ClientCertificates.generate(signedBy: certificates)
    }

    func contextError(_ identity: ClientCertificate) -> TransportError? {
        var configuration = DKTLSConfiguration(additionalTrustRootFiles: [certificates.caCertificatePath])
        configuration.clientCertificate = identity
        do {
            _ = try TLSContext(configuration: configuration)
            return nil
        } catch {
            return error
        }
    }

    @Test func keyProblemsAreTypedErrors() {
        let valid = clients.valid
        #expect(contextError(ClientCertificate(certificatePath: valid.certificatePath, privateKeyPath: valid.privateKeyPath)) == nil)
        #expect(
            contextError(
                ClientCertificate(
                    certificatePath: valid.certificatePath, privateKeyPath: clients.encryptedKeyPath,
                    passphrase: clients.passphrase)) == nil)
        #expect(
            contextError(
                ClientCertificate(
                    certificatePath: valid.certificatePath, privateKeyPath: clients.encryptedKeyPath, passphrase: "nope"))?
                .code == .clientKeyPassphraseWrong)
        #expect(
            contextError(ClientCertificate(certificatePath: valid.certificatePath, privateKeyPath: clients.encryptedKeyPath))?
                .code == .clientKeyPassphraseRequired)
        #expect(
            contextError(ClientCertificate(certificatePath: valid.certificatePath, privateKeyPath: clients.unrelatedKeyPath))?
                .code == .clientKeyMismatch)
        #expect(
            contextError(ClientCertificate(certificatePath: valid.privateKeyPath, privateKeyPath: valid.privateKeyPath))?
                .code == .clientCertificateInvalid)
        #expect(
            contextError(ClientCertificate(certificatePath: valid.certificatePath, privateKeyPath: "/nonexistent/key.pem"))?
                .code == .clientKeyInvalid)
    }

    @Test func pinnedKeyIsCheckedAfterVerification() throws {
        let server = try OpenSSLServer(certificate: certificates.valid)
        defer { server.stop() }
        let rightPin = try ClientCertificates.opensslPublicKeyPin(certificatePath: certificates.valid.certificatePath)
        let wrongPin = try ClientCertificates.opensslPublicKeyPin(certificatePath: certificates.weakKey.certificatePath)
        func connect(pins: String) throws {
            var configuration = DKTLSConfiguration(additionalTrustRootFiles: [certificates.caCertificatePath])
            configuration.useSystemTrustRoots = false
            configuration.pinnedPublicKeys = try PublicKeyPin.parseList(pins)
            let connection = try Connection.connect(
                host: "127.0.0.1", port: server.port, tls: try TLSContext(configuration: configuration),
                serverName: "localhost", deadline: .after(seconds: 10))
            connection.close()
        }
        try connect(pins: rightPin)
        try connect(pins: wrongPin + ";" + rightPin)
        do {
            try connect(pins: wrongPin)
            Issue.record("a wrong pin was accepted")
        } catch let error as TransportError {
            #expect(error.code == .publicKeyPinMismatch)
            #expect(error.detail.contains(rightPin), "the seen key is named: \(error.detail)")
        }
        #expect(throws: WireError.self) { try PublicKeyPin.parseList("sha1//abc") }
        #expect(throws: WireError.self) { try PublicKeyPin.parseList("sha256//AAAA") }
    }
}
