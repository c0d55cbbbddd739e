import ArgumentParser

/// The daemon's command-line options, shared by `downloadkitd` and `downloadkit daemon`.
public struct DaemonArguments: ParsableArguments {
    @Option(name: .customLong("state"), help: "Directory of the sessions' state (default: $XDG_STATE_HOME/downloadkit/sessions).")
    public var state: String?

    @Option(name: .customLong("socket"), help: "Control socket (default: $XDG_RUNTIME_DIR/downloadkit/daemon.sock).")
    public var socket: String?

    @Option(name: .customLong("max-concurrent"), help: "Transfers running at once per session (default 3).")
    public var maxConcurrent: Int?

    public init() {}

    /// Runs the daemon with these options until SIGTERM/SIGINT; throws the exit code on failure.
    /// - Parameter frontEnd: See ``SessionDaemon/run(ready:frontEnd:)``.
    public func run(
        frontEnd: (@Sendable (SessionRegistry) async throws -> (@Sendable () async -> Void)?)? = nil
    ) async throws {
        let status = await SessionDaemon.main(
            stateRoot: state, socketPath: socket, maxConcurrent: maxConcurrent, frontEnd: frontEnd)
        if status != 0 { throw ExitCode(status) }
    }
}
