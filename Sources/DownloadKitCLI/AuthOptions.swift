import ArgumentParser
import Foundation
import HTTPClient
import HTTPWire

/// Credentials, cookies, client certificates and key pins (`get`), applied to the client configuration.
struct AuthOptions: ParsableArguments {
    @Option(name: [.customShort("u"), .customLong("user")], help: ArgumentHelp(
        "user:password for Basic or Digest authentication, sent only to the origin of each URL given (never after a redirect to another origin, never over http for an https URL).",
        valueName: "user:password"))
    var user: String?

    @Option(name: .customLong("user-file"), help: ArgumentHelp(
        "Like --user, read from the first line of this file (yours, mode 0600: refused otherwise), so the password is not in the command line. Also: $DOWNLOADKIT_USER.",
        valueName: "path"))
    var userFile: String?

    @Flag(name: .customLong("netrc"), help: "Take credentials for each URL's host from $NETRC or ~/.netrc.")
    var netrc = false

    @Option(name: .customLong("netrc-file"), help: "Take credentials for each URL's host from this netrc file.")
    var netrcFile: String?

    @Option(name: .customLong("cookie"), help: "Read cookies from this Netscape-format cookie file.")
    var cookieFile: String?

    @Option(name: .customLong("cookie-jar"), help: "Write cookies to this Netscape-format file (mode 0600) as they arrive and at the end.")
    var cookieJarFile: String?

    @Option(name: .customLong("cert"), help: "Client certificate (PEM) for mutual TLS.")
    var certificate: String?

    @Option(name: .customLong("key"), help: "Private key (PEM) of --cert, possibly encrypted (default: the --cert file).")
    var key: String?

    @Option(name: .customLong("key-passphrase"), help: "Passphrase of an encrypted --key (masked in ps once parsed, visible before that; prefer --key-passphrase-file or DOWNLOADKIT_KEY_PASSPHRASE).")
    var keyPassphrase: String?

    @Option(name: .customLong("key-passphrase-file"), help: "Read the passphrase of --key from the first line of this file.")
    var keyPassphraseFile: String?

    @Option(name: .customLong("pinnedpubkey"), help: ArgumentHelp(
        "Require the server's public key to match one of these SHA-256 SPKI pins (checked after certificate verification).",
        valueName: "sha256//BASE64[;sha256//BASE64...]"))
    var pinnedPublicKeys: String?

    /// Environment variable holding the passphrase of `--key`.
    static let passphraseEnvironment = "DOWNLOADKIT_KEY_PASSPHRASE"

    /// Environment variable holding `user:password` when neither `--user` nor `--user-file` is given.
    static let userEnvironment = "DOWNLOADKIT_USER"

    /// `user:password` from `--user`, else `--user-file`, else `$DOWNLOADKIT_USER`; nil when none is set.
    /// - Throws: `ValidationError` with the ``SecretFileError`` text (option, file, reason) when the
    ///   file is refused.
    func userCredential() throws -> String? {
        if let user { return user }
        if let userFile {
            do {
                return try SecretFile.firstLine(userFile, option: "--user-file")
            } catch {
                throw ValidationError(error.description)
            }
        }
        if let value = ProcessInfo.processInfo.environment[Self.userEnvironment], !value.isEmpty { return value }
        return nil
    }

    func validate() throws {
        if user != nil && userFile != nil { throw ValidationError("--user and --user-file cannot be used together") }
        if netrc && netrcFile != nil { throw ValidationError("--netrc and --netrc-file cannot be used together") }
        if (key != nil || keyPassphrase != nil || keyPassphraseFile != nil) && certificate == nil {
            throw ValidationError("--key and its passphrase need --cert")
        }
        if keyPassphrase != nil && keyPassphraseFile != nil {
            throw ValidationError("--key-passphrase and --key-passphrase-file cannot be used together")
        }
        if let pinnedPublicKeys {
            do {
                _ = try PublicKeyPin.parseList(pinnedPublicKeys)
            } catch {
                throw ValidationError("--pinnedpubkey: \(error.detail)")
            }
        }
    }

    /// Adds the authenticator, cookie jar, client certificate and pins to `configuration`.
    /// - Parameter urls: The URLs on the command line; credentials are bound to their origins.
    /// - Throws: `ValidationError` naming the file or value at fault.
    func apply(to configuration: inout DKHTTPClientConfiguration, urls: [String]) throws {
        if try userCredential() != nil || netrc || netrcFile != nil {
            let authenticator = Authenticator()
            try bindCredentials(in: authenticator, to: urls)
            configuration.authenticator = authenticator
        }
        if cookieFile != nil || cookieJarFile != nil {
            var cookies: [Cookie] = []
            if let cookieFile {
                do {
                    cookies = try CookieJar.load(path: cookieFile)
                } catch {
                    throw ValidationError("\(error)")
                }
            }
            configuration.cookieJar = CookieJar(cookies: cookies, persistencePath: cookieJarFile)
        }
        if let certificate {
            var passphrase = keyPassphrase ?? ProcessInfo.processInfo.environment[Self.passphraseEnvironment]
            if let keyPassphraseFile {
                guard let text = try? String(contentsOfFile: keyPassphraseFile, encoding: .utf8) else {
                    throw ValidationError("cannot read --key-passphrase-file \(keyPassphraseFile)")
                }
                passphrase = String(text.split(separator: "\n", omittingEmptySubsequences: false).first ?? "")
            }
            configuration.tls.clientCertificate = ClientCertificate(
                certificatePath: certificate, privateKeyPath: key, passphrase: passphrase)
        }
        if let pinnedPublicKeys {
            configuration.tls.pinnedPublicKeys = (try? PublicKeyPin.parseList(pinnedPublicKeys)) ?? []
        }
    }

    /// Binds `--user` and the netrc entries to the origins of `urls` (the authenticator is shared by
    /// reference, so URLs known only later, like a queue's tasks, can be bound after the client exists).
    /// - Throws: `ValidationError` naming an unreadable or malformed netrc file.
    func bindCredentials(in authenticator: Authenticator, to urls: [String]) throws {
        let parsedURLs = urls.compactMap { try? HTTPURL($0) }
        if let user = try userCredential() {
            for url in parsedURLs { authenticator.addCredential(Credential(userColonPassword: user), for: url) }
        }
        if let path = netrcFile ?? (netrc ? NetrcFile.defaultPath : nil) {
            do {
                authenticator.addNetrcCredentials(try NetrcFile.load(path: path), for: parsedURLs)
            } catch {
                throw ValidationError("netrc file \(error)")
            }
        }
    }
}
