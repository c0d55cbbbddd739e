import Foundation
import PostgresNIO

/// Where a ``PostgresTaskStore`` connects: parsed from `postgres://user[:password]@host[:port]/database`.
///
/// Query parameters: `sslmode=disable|prefer|require` (default `prefer`: TLS when the server offers it)
/// and `host=/directory`, which connects through the server's Unix socket in that directory instead of
/// TCP (libpq's convention). The password may also come from `PGPASSWORD`.
public struct PostgresStoreURL: Sendable, CustomStringConvertible {
    /// TLS use.
    public enum TLSMode: String, Sendable {
        /// Plain TCP.
        case disable
        /// TLS when the server offers it (the certificate is verified then).
        case prefer
        /// TLS or no connection (the certificate is verified against the system's trust store).
        case require
    }

    /// The server's host name or address (TCP).
    public var host: String
    /// The server's port (default 5432; also names the Unix socket file).
    public var port: Int
    /// A directory holding the server's Unix socket (`.s.PGSQL.<port>`), instead of TCP.
    public var socketDirectory: String?
    /// The role to log in as.
    public var user: String
    /// Its password, if the server asks for one.
    public var password: String?
    /// The database holding the queue's tables (default: the user's name).
    public var database: String
    /// TLS use.
    public var tls: TLSMode

    /// Parses `text`; nil when it is not a `postgres://` or `postgresql://` URL with a user.
    public init?(_ text: String, environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard text.hasPrefix("postgres://") || text.hasPrefix("postgresql://"),
            let components = URLComponents(string: text), let user = components.user, !user.isEmpty
        else { return nil }
        self.user = user.removingPercentEncoding ?? user
        password = components.password?.removingPercentEncoding ?? environment["PGPASSWORD"]
        host = components.host.flatMap { $0.isEmpty ? nil : $0 } ?? "127.0.0.1"
        port = components.port ?? 5432
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        database = path.isEmpty ? self.user : (path.removingPercentEncoding ?? path)
        var tls = TLSMode.prefer
        for item in components.queryItems ?? [] {
            switch item.name {
            case "sslmode":
                guard let value = item.value else { return nil }
                switch value {
                case "disable", "allow": tls = .disable
                case "prefer": tls = .prefer
                case "require", "verify-ca", "verify-full": tls = .require
                default: return nil
                }
            case "host":
                guard let value = item.value, value.hasPrefix("/") else { return nil }
                socketDirectory = value
            default:
                continue
            }
        }
        self.tls = tls
    }

    /// The URL without its password.
    public var description: String {
        let place = socketDirectory.map { "?host=\($0)" } ?? ""
        return "postgres://\(user)@\(host):\(port)/\(database)\(place)"
    }

    /// The socket path when `host=` named a directory.
    var socketPath: String? { socketDirectory.map { "\($0)/.s.PGSQL.\(port)" } }

    var clientConfiguration: PostgresClient.Configuration {
        if let socketPath {
            return PostgresClient.Configuration(
                unixSocketPath: socketPath, username: user, password: password, database: database)
        }
        let mode: PostgresClient.Configuration.TLS
        switch tls {
        case .disable: mode = .disable
        case .prefer: mode = .prefer(.makeClientConfiguration())
        case .require: mode = .require(.makeClientConfiguration())
        }
        return PostgresClient.Configuration(
            host: host, port: port, username: user, password: password, database: database, tls: mode)
    }

    func connectionConfiguration() throws -> PostgresConnection.Configuration {
        if let socketPath {
            return PostgresConnection.Configuration(
                unixSocketPath: socketPath, username: user, password: password, database: database)
        }
        let mode: PostgresConnection.Configuration.TLS
        switch tls {
        case .disable: mode = .disable
        case .prefer: mode = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
        case .require: mode = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
        }
        return PostgresConnection.Configuration(
            host: host, port: port, username: user, password: password, database: database, tls: mode)
    }
}
