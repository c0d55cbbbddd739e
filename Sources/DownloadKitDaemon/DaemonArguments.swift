import ArgumentParser

/// The daemon's command-line options, shared by `downloadkitd` and `downloadkit daemon`.
public struct DaemonArguments: ParsableArguments {
    @Option(name: .customLong("state"), help: "Directory of the sessions' state (default: $XDG_STATE_HOME/downloadkit/sessions).")
    public var state: String?

    @Option(name: .customLong("socket"), help: "Control socket (default: $XDG_RUNTIME_DIR/downloadkit/daemon.sock).")
    public var socket: String?

    @Option(name: .customLong("max-concurrent"), help: "Transfers running at once per session (default 3).")
    public var maxConcurrent: Int?

    @Option(
        name: .customLong("max-connections"),
        help: "Control-socket connections served at once (default 128, and at most half the descriptor limit).")
    public var maxConnections: Int?

    @Option(
        name: .customLong("max-buffered-bytes"),
        help: "Bytes buffered for all control-socket clients together (default 33554432 = 32 MiB).")
    public var maxBufferedBytes: Int?

    @Option(
        name: .customLong("frame-timeout"),
        help: "Seconds a client's frame (and its first frame, the hello) may take to arrive complete (default 15).")
    public var frameTimeout: Double?

    @Option(
        name: .customLong("idle-timeout"),
        help: "Seconds a client with no event subscription and nothing in flight may stay silent (default 600).")
    public var idleTimeout: Double?

    public init() {}

    /// Refuses a limit option that is not positive (the message names the option).
    public func validate() throws { _ = try limits() }

    /// The control socket's bounds: the defaults of ``ControlServer/Limits`` with these options applied.
    /// - Throws: `ValidationError` naming the option when a value is not positive.
    public func limits() throws -> ControlServer.Limits {
        var limits = ControlServer.Limits()
        if let maxConnections {
            guard maxConnections > 0 else { throw ValidationError("--max-connections must be at least 1 (got \(maxConnections))") }
            limits.maxConnections = maxConnections
        }
        if let maxBufferedBytes {
            guard maxBufferedBytes >= ControlServer.Limits.maxInputBytes else {
                throw ValidationError(
                    "--max-buffered-bytes must be at least \(ControlServer.Limits.maxInputBytes), one largest frame (got \(maxBufferedBytes))")
            }
            limits.maxBufferedBytes = maxBufferedBytes
        }
        if let frameTimeout {
            guard frameTimeout > 0, frameTimeout.isFinite else { throw ValidationError("--frame-timeout must be a positive number of seconds (got \(frameTimeout))") }
            limits.frameTimeout = frameTimeout
        }
        if let idleTimeout {
            guard idleTimeout > 0, idleTimeout.isFinite else { throw ValidationError("--idle-timeout must be a positive number of seconds (got \(idleTimeout))") }
            limits.idleTimeout = idleTimeout
        }
        return limits
    }

    /// Runs the daemon with these options until SIGTERM/SIGINT; throws the exit code on failure.
    /// - Parameter frontEnd: See ``SessionDaemon/run(ready:frontEnd:)``.
    public func run(
        frontEnd: (@Sendable (SessionRegistry) async throws -> (@Sendable () async -> Void)?)? = nil
    ) async throws {
        let status = await SessionDaemon.main(
            stateRoot: state, socketPath: socket, maxConcurrent: maxConcurrent, limits: try limits(), frontEnd: frontEnd)
        if status != 0 { throw ExitCode(status) }
    }
}
