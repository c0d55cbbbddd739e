import Foundation
import Glibc

/// A private PostgreSQL server for one test or benchmark (FleetTests, downloadkit-fleet-bench): `initdb` into
/// a fresh temporary directory, started on a free loopback port with its socket in that directory and trust
/// authentication (its own pg_hba.conf), stopped with `pg_ctl stop -m immediate` and removed by ``stop()``.
/// Made for throwaway data: `fsync`, `synchronous_commit` and `full_page_writes` are off.
///
/// PostgreSQL refuses to run as root, and tests run as root here and in CI: then `initdb` and `pg_ctl`
/// run as the `postgres` system user (`runuser -u postgres --`), which owns the directory (the user is
/// created with `useradd` if Debian's package did not). Anything that goes wrong throws: a test that
/// needs the server fails, it never skips.
public final class PostgresServer: Sendable {
    /// Why the server could not be started or a command failed (the command, its status and output).
    public struct Failure: Error, CustomStringConvertible {
        /// What failed, with the command's output or the server's log.
        public var description: String
    }

    /// The loopback TCP port the server listens on (127.0.0.1).
    public let port: Int
    /// The temporary directory: the cluster in `data/`, the server's log and its Unix socket.
    public let directory: String
    /// The directory of the server's programs (`/usr/lib/postgresql/<version>/bin`).
    public let binaries: String
    private let runsAsPostgres: Bool

    /// `postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable`.
    public var url: String { url(database: "postgres") }

    /// `postgres://postgres@127.0.0.1:PORT/DATABASE?sslmode=disable`.
    public func url(database: String) -> String {
        "postgres://postgres@127.0.0.1:\(port)/\(database)?sslmode=disable"
    }

    /// Initialises a cluster in a new temporary directory and starts the server on a free port (five tries).
    /// - Throws: ``Failure`` when the binaries are missing or `initdb` or `pg_ctl start` fails (with the log).
    public init() throws {
        binaries = try Self.findBinaries()
        runsAsPostgres = geteuid() == 0
        var template = Array("/tmp/dk-postgres-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw Failure(description: "mkdtemp failed: errno \(errno)") }
        directory = String(cString: made)
        chmod(directory, 0o755)
        if runsAsPostgres {
            try Self.ensurePostgresUser()
            try Self.run("/bin/chown", ["-R", "postgres:postgres", directory])
        }
        let data = directory + "/data"
        let binaries = self.binaries
        let asPostgres = runsAsPostgres
        let directory = self.directory
        func command(_ name: String, _ arguments: [String]) throws {
            try Self.command(name, arguments, binaries: binaries, asPostgres: asPostgres)
        }
        do {
            try command("initdb", ["-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"])
            let hba = "local all all trust\nhost all all 127.0.0.1/32 trust\n"
            try hba.write(toFile: data + "/pg_hba.conf", atomically: true, encoding: .utf8)
            if runsAsPostgres { try Self.run("/bin/chown", ["postgres:postgres", data + "/pg_hba.conf"]) }
            var started: Int?
            var lastError = ""
            for _ in 0..<5 {
                let candidate = try FreePort.allocate()[0]
                let options =
                    "-p \(candidate) -k \(directory) -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=50 -c shared_buffers=16MB"
                do {
                    try command("pg_ctl", ["-D", data, "-l", directory + "/server.log", "-w", "-t", "120", "-o", options, "start"])
                    started = candidate
                    break
                } catch {
                    lastError = "\(error)\n" + ((try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? "")
                }
            }
            guard let started else { throw Failure(description: "PostgreSQL did not start: \(lastError)") }
            port = started
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    /// Creates an empty database `name` (`createdb` over TCP as the `postgres` role).
    /// - Throws: ``Failure`` with `createdb`'s output.
    public func createDatabase(_ name: String) throws {
        try Self.run(binaries + "/createdb", ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", name])
    }

    /// Stops the server at once (`-m immediate`) and removes its directory.
    public func stop() {
        _ = try? command("pg_ctl", ["-D", directory + "/data", "-m", "immediate", "-w", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The server's log (for failure messages).
    public var log: String { (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? "" }

    @discardableResult
    private func command(_ name: String, _ arguments: [String]) throws -> String {
        try Self.command(name, arguments, binaries: binaries, asPostgres: runsAsPostgres)
    }

    @discardableResult
    private static func command(_ name: String, _ arguments: [String], binaries: String, asPostgres: Bool) throws -> String {
        let program = binaries + "/" + name
        if asPostgres {
            return try Self.run("/usr/sbin/runuser", ["-u", "postgres", "--", program] + arguments)
        }
        return try Self.run(program, arguments)
    }

    @discardableResult
    private static func run(_ program: String, _ arguments: [String]) throws -> String {
        let path = FileManager.default.isExecutableFile(atPath: program)
            ? program : (ProcessRunner.findExecutable((program as NSString).lastPathComponent) ?? program)
        // posix_spawn with every other descriptor closed and the output in a file: the server that
        // `pg_ctl start` leaves running must not hold a pipe of ours open.
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("dk-postgres-\(UUID().uuidString).out").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let child = try spawnProcess(path, arguments, standardOutput: output, standardError: nil)
        guard child.result == 0 else {
            throw Failure(description: "cannot start \(path): \(String(cString: strerror(child.result)))")
        }
        var status: Int32 = 0
        while waitpid(child.pid, &status, 0) < 0 && errno == EINTR {}
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        guard status == 0 else {
            throw Failure(description: "\(program) \(arguments.joined(separator: " ")) failed (status \(status)): \(text)")
        }
        return text
    }

    /// The newest `/usr/lib/postgresql/<version>/bin` holding initdb, pg_ctl and postgres.
    private static func findBinaries() throws -> String {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .compactMap { name in Int(name).map { ($0, root + "/" + name + "/bin") } }
            .sorted { $0.0 > $1.0 }
        for (_, bin) in versions
        where ["initdb", "pg_ctl", "postgres"].allSatisfy({ FileManager.default.isExecutableFile(atPath: bin + "/" + $0) }) {
            return bin
        }
        throw Failure(
            description: "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (bash Scripts/install-deps.sh installs Debian's postgresql)")
    }

    private static func ensurePostgresUser() throws {
        if getpwnam("postgres") != nil { return }
        try run("/usr/sbin/useradd", ["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres"])
    }
}
