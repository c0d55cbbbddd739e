import Foundation
import HTTPWire

/// Client certificates for mutual-TLS tests, signed by the CA of a ``TestCertificates`` set (the
/// files `ca.pem`/`ca.key` and `other-ca.pem`/`other-ca.key` beside its CA certificate).
public struct ClientCertificates: Sendable {
    /// A client certificate (EKU clientAuth) signed by the test CA, with its unencrypted key.
    public var valid: CertificateFiles
    /// The same key encrypted with AES-256 (PKCS#8) under ``passphrase``.
    public var encryptedKeyPath: String
    /// The passphrase of ``encryptedKeyPath``.
    public var passphrase: String
    /// A client certificate signed by the second CA, which the server does not trust.
    public var untrusted: CertificateFiles
    /// A key that belongs to no client certificate (for key/certificate mismatch).
    public var unrelatedKeyPath: String
    /// The CA file a server should trust for client certificates (the test CA).
    public var authorityPath: String

    /// Generates the client certificates next to `certificates`' CA with the `openssl` tool.
    /// - Throws: ``OriginError`` naming the `openssl` command that failed.
    public static func generate(signedBy certificates: TestCertificates, passphrase: String = "correct horse")
        throws -> ClientCertificates
    {
        let directory = (certificates.caCertificatePath as NSString).deletingLastPathComponent
        func path(_ name: String) -> String { (directory as NSString).appendingPathComponent(name) }
        func openssl(_ arguments: [String]) throws {
            let result = try ProcessRunner.run("openssl", arguments, currentDirectory: directory)
            guard result.succeeded else {
                throw OriginError("openssl \(arguments.joined(separator: " "))", detail: result.output)
            }
        }
        try """
            basicConstraints = critical, CA:FALSE
            keyUsage = critical, digitalSignature
            extendedKeyUsage = clientAuth

            """.write(toFile: path("client-ext.cnf"), atomically: true, encoding: .utf8)
        let p256 = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
        try openssl(["genpkey"] + p256 + ["-out", "client.key"])
        try openssl(["genpkey"] + p256 + ["-out", "unrelated.key"])
        try openssl(["req", "-new", "-key", "client.key", "-subj", "/CN=downloadkit-client", "-out", "client.csr"])
        try openssl([
            "x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "7001",
            "-days", "365", "-extfile", "client-ext.cnf", "-out", "client.pem",
        ])
        try openssl([
            "x509", "-req", "-in", "client.csr", "-CA", "other-ca.pem", "-CAkey", "other-ca.key", "-set_serial",
            "7002", "-days", "365", "-extfile", "client-ext.cnf", "-out", "client-untrusted.pem",
        ])
        try openssl([
            "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", "client.key", "-passout", "pass:" + passphrase, "-out",
            "client-encrypted.key",
        ])
        return ClientCertificates(
            valid: CertificateFiles(certificatePath: path("client.pem"), privateKeyPath: path("client.key")),
            encryptedKeyPath: path("client-encrypted.key"),
            passphrase: passphrase,
            untrusted: CertificateFiles(
                certificatePath: path("client-untrusted.pem"), privateKeyPath: path("client.key")),
            unrelatedKeyPath: path("unrelated.key"),
            authorityPath: certificates.caCertificatePath)
    }
}

extension ClientCertificates {
    /// The `sha256//BASE64` pin of a certificate's public key, computed by the `openssl` tool
    /// (x509 → pkey DER → dgst → base64), independently of the client's code.
    /// - Throws: ``OriginError`` with openssl's output when the pipeline fails.
    public static func opensslPublicKeyPin(certificatePath: String) throws -> String {
        let result = try ProcessRunner.run(
            "/bin/sh",
            [
                "-c",
                "openssl x509 -in \"$1\" -pubkey -noout | openssl pkey -pubin -outform der"
                    + " | openssl dgst -sha256 -binary | base64",
                "sh", certificatePath,
            ])
        let base64 = result.output.trimmingCharacters(in: .whitespacesAndNewlines)
        guard result.succeeded, base64.count == 44 else {
            throw OriginError("computing the public key pin of \(certificatePath)", detail: result.output)
        }
        return "sha256//" + base64
    }
}

/// nginx `auth_basic` fixtures.
public enum BasicAuthFixture {
    /// An htpasswd line `user:$apr1$…` made with `openssl passwd -apr1`.
    /// - Throws: ``OriginError`` when openssl fails.
    public static func htpasswdLine(user: String, password: String) throws -> String {
        let result = try ProcessRunner.run("openssl", ["passwd", "-apr1", password])
        guard result.succeeded else { throw OriginError("openssl passwd -apr1", detail: result.output) }
        return user + ":" + result.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Directives for ``NginxConfiguration/extraServerDirectives``: `prefix` (like `/private/`) serves
    /// `documentRoot` behind `auth_basic` with the users in `userFile`, paced at `limitRate` bytes per
    /// second per connection when given.
    public static func location(prefix: String, documentRoot: String, userFile: String, limitRate: Int? = nil)
        -> String
    {
        let root = documentRoot.hasSuffix("/") ? documentRoot : documentRoot + "/"
        let pacing = limitRate.map { "\n                limit_rate \($0);" } ?? ""
        return """
                    location \(prefix) {
                        alias \(NginxServer.quoted(root));
                        auth_basic "DownloadKit test";
                        auth_basic_user_file \(NginxServer.quoted(userFile));\(pacing)
                    }
            """
    }
}

/// A FaultOrigin pair of routes for cookie tests: `loginPath` answers `302` to `filePath` with
/// `Set-Cookie: name=value; Path=/`, and `filePath` serves the body only to requests carrying the
/// cookie (others get `403`).
public struct CookieGate: Sendable {
    /// The cookie name.
    public var name: String
    /// The cookie value.
    public var value: String

    /// Creates a gate.
    public init(name: String = "session", value: String = "s3cr3t-\(UInt32.random(in: 0...UInt32.max))") {
        self.name = name
        self.value = value
    }

    /// The login route: a redirect to `location` setting the cookie (with any extra attributes).
    public func login(redirectTo location: String, attributes: String = "Path=/") -> Route {
        .response(
            status: 302, headers: [("Location", location), ("Set-Cookie", "\(name)=\(value); \(attributes)")], body: [])
    }

    /// The protected route: `body` for requests with the cookie, `403` otherwise.
    public func protected(body: [UInt8]) -> Route {
        let expected = "\(name)=\(value)"
        return .script { request, connection in
            connection.keepsAlive = true
            let cookies = request.header("Cookie")?.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            if cookies?.contains(expected) == true {
                try connection.write("HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\n\r\n")
                try connection.write(body)
            } else {
                try connection.write("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            }
        }
    }
}
