import Foundation

/// A certificate and its private key, both PEM files.
public struct CertificateFiles: Sendable, Hashable {
    /// The PEM certificate.
    public var certificatePath: String
    /// The PEM private key (unencrypted).
    public var privateKeyPath: String

    /// Creates a pair of paths.
    public init(certificatePath: String, privateKeyPath: String) {
        self.certificatePath = certificatePath
        self.privateKeyPath = privateKeyPath
    }
}

/// A test certificate authority and server certificates for every verification outcome, generated
/// at test time with the `openssl` command-line tool (OpenSSL 3.0 or newer). Nothing is checked in,
/// so nothing expires in the repository.
///
/// All server certificates use one P-256 key (fast to generate; the key is not what the tests are
/// about). Every certificate except ``wrongHost`` names `localhost`, `127.0.0.1` and `::1`, so each
/// one fails for exactly one reason.
public struct TestCertificates: Sendable {
    /// The test CA's certificate (PEM): give this to the client as a trust root.
    public var caCertificatePath: String
    /// Valid now (from a day ago for a year), SAN `DNS:localhost, IP:127.0.0.1, IP:::1`, signed by the CA.
    public var valid: CertificateFiles
    /// Valid only in January 2020, otherwise like ``valid``.
    public var expired: CertificateFiles
    /// Valid only in December 2099, otherwise like ``valid``.
    public var notYetValid: CertificateFiles
    /// SAN `DNS:wrong.example` only, signed by the CA.
    public var wrongHost: CertificateFiles
    /// Signed by the test CA and naming localhost, but with a 1024-bit RSA key (below security level 2).
    public var weakKey: CertificateFiles
    /// Self-signed, with the SAN of ``valid``.
    public var selfSigned: CertificateFiles
    /// Signed by a second CA that is not given to the client, with the SAN of ``valid``.
    public var unknownCA: CertificateFiles

    /// A failure to run `openssl`, with the command and its output.
    public struct GenerationError: Error, CustomStringConvertible {
        /// The command line that failed.
        public var command: String
        /// Its exit status (or -1 if it could not be started).
        public var status: Int32
        /// Its standard output and error.
        public var output: String

        public var description: String { "`\(command)` failed with status \(status): \(output)" }
    }

    /// Generates the CA and all certificates into `directory` (created if missing). Takes well
    /// under a second.
    /// - Parameter directory: Where to write the files; existing files with the same names are replaced.
    /// - Throws: ``GenerationError`` when `openssl` is missing or fails; file-system errors.
    public static func generate(in directory: String) throws -> TestCertificates {
        let fileManager = FileManager.default
        try fileManager.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let runner = OpenSSLRunner(directory: directory)
        func path(_ name: String) -> String { (directory as NSString).appendingPathComponent(name) }

        // `openssl ca` keeps its database in the directory.
        try "".write(toFile: path("index.txt"), atomically: true, encoding: .utf8)
        try "1000\n".write(toFile: path("serial"), atomically: true, encoding: .utf8)
        try configuration.write(toFile: path("openssl.cnf"), atomically: true, encoding: .utf8)

        let now = Date()
        let day: TimeInterval = 86_400
        try runner.run(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ca.key"])
        try runner.run([
            "req", "-config", "openssl.cnf", "-new", "-x509", "-key", "ca.key", "-subj", "/CN=DownloadKit Test CA",
            "-days", "3650", "-extensions", "ca_ext", "-out", "ca.pem",
        ])
        try runner.run(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "other-ca.key"])
        try runner.run([
            "req", "-config", "openssl.cnf", "-new", "-x509", "-key", "other-ca.key",
            "-subj", "/CN=DownloadKit Unknown Test CA", "-days", "3650", "-extensions", "ca_ext", "-out",
            "other-ca.pem",
        ])
        try runner.run(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "server.key"])
        try runner.run([
            "req", "-config", "openssl.cnf", "-new", "-key", "server.key", "-subj", "/CN=localhost", "-out",
            "server.csr",
        ])

        func sign(_ output: String, extensions: String, from start: Date, to end: Date) throws {
            try runner.run([
                "ca", "-batch", "-config", "openssl.cnf", "-extensions", extensions, "-notext",
                "-startdate", timestamp(start), "-enddate", timestamp(end), "-in", "server.csr", "-out", output,
            ])
        }
        let calendar = Calendar(identifier: .gregorian)
        let utc = TimeZone(identifier: "UTC") ?? TimeZone.current
        func date(_ year: Int, _ month: Int, _ day: Int) -> Date {
            calendar.date(from: DateComponents(timeZone: utc, year: year, month: month, day: day)) ?? now
        }
        try sign("valid.pem", extensions: "server_ext", from: now - day, to: now + 365 * day)
        try sign("expired.pem", extensions: "server_ext", from: date(2020, 1, 1), to: date(2020, 2, 1))
        try sign("not-yet-valid.pem", extensions: "server_ext", from: date(2099, 12, 1), to: date(2099, 12, 31))
        try sign("wrong-host.pem", extensions: "wrong_host_ext", from: now - day, to: now + 365 * day)
        try runner.run([
            "req", "-config", "openssl.cnf", "-new", "-x509", "-key", "server.key", "-subj", "/CN=localhost",
            "-days", "365", "-extensions", "server_ext", "-out", "self-signed.pem",
        ])
        try runner.run([
            "x509", "-req", "-in", "server.csr", "-CA", "other-ca.pem", "-CAkey", "other-ca.key",
            "-set_serial", "4242", "-days", "365", "-extfile", "openssl.cnf", "-extensions", "server_ext",
            "-out", "unknown-ca.pem",
        ])

        try runner.run(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024", "-out", "weak.key"])
        try runner.run([
            "req", "-config", "openssl.cnf", "-new", "-key", "weak.key", "-subj", "/CN=localhost", "-out", "weak.csr",
        ])
        try runner.run([
            "x509", "-req", "-in", "weak.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "4343", "-days",
            "365", "-extfile", "openssl.cnf", "-extensions", "server_ext", "-out", "weak-key.pem",
        ])

        func leaf(_ name: String) -> CertificateFiles {
            CertificateFiles(certificatePath: path(name), privateKeyPath: path("server.key"))
        }
        return TestCertificates(
            caCertificatePath: path("ca.pem"),
            valid: leaf("valid.pem"),
            expired: leaf("expired.pem"),
            notYetValid: leaf("not-yet-valid.pem"),
            wrongHost: leaf("wrong-host.pem"),
            weakKey: CertificateFiles(certificatePath: path("weak-key.pem"), privateKeyPath: path("weak.key")),
            selfSigned: leaf("self-signed.pem"),
            unknownCA: leaf("unknown-ca.pem"))
    }

    /// `YYYYMMDDHHMMSSZ` (ASN.1 GeneralizedTime), as `openssl ca -startdate/-enddate` takes it.
    private static func timestamp(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMddHHmmss'Z'"
        return formatter.string(from: date)
    }

    /// One self-contained configuration, so the system's openssl.cnf cannot add or clash with
    /// extensions.
    private static let configuration = """
        [ req ]
        distinguished_name = req_dn
        prompt = no
        [ req_dn ]
        CN = DownloadKit Test
        [ ca ]
        default_ca = test_ca
        [ test_ca ]
        dir = .
        database = index.txt
        new_certs_dir = .
        serial = serial
        certificate = ca.pem
        private_key = ca.key
        default_md = sha256
        policy = policy_any
        unique_subject = no
        email_in_dn = no
        copy_extensions = none
        [ policy_any ]
        commonName = supplied
        [ ca_ext ]
        basicConstraints = critical, CA:TRUE
        keyUsage = critical, keyCertSign, cRLSign
        subjectKeyIdentifier = hash
        [ server_ext ]
        basicConstraints = critical, CA:FALSE
        keyUsage = critical, digitalSignature
        extendedKeyUsage = serverAuth
        subjectAltName = DNS:localhost, IP:127.0.0.1, IP:::1
        [ wrong_host_ext ]
        basicConstraints = critical, CA:FALSE
        keyUsage = critical, digitalSignature
        extendedKeyUsage = serverAuth
        subjectAltName = DNS:wrong.example

        """
}

/// Runs `openssl` subcommands in a working directory.
private struct OpenSSLRunner {
    let directory: String

    func run(_ arguments: [String]) throws {
        let command = (["openssl"] + arguments).joined(separator: " ")
        let result: ProcessRunner.Result
        do {
            result = try ProcessRunner.run("openssl", arguments, currentDirectory: directory)
        } catch {
            throw TestCertificates.GenerationError(command: command, status: -1, output: "\(error)")
        }
        guard result.succeeded else {
            throw TestCertificates.GenerationError(command: command, status: result.status, output: result.output)
        }
    }
}
