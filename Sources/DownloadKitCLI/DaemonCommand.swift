import ArgumentParser
import DownloadKitDaemon
import DownloadKitRPC
import Foundation

/// `downloadkit daemon`: runs `downloadkitd` in the foreground (docs/DAEMON.md), optionally with the
/// aria2-compatible JSON-RPC listener (docs/RPC.md) over one of its sessions.
struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon",
        abstract: "Run the background-session daemon in the foreground (SIGTERM checkpoints and exits 0).",
        discussion: """
            Owns one download manager per session identifier (state in DIR/<identifier>/) and serves \
            `downloadkit session` and BackgroundSession clients on a Unix socket (mode 0600; other users \
            are refused). Transfers go on after the clients exit; events missed meanwhile are kept and \
            delivered when a client of the session connects again. With --rpc-listen it also answers \
            aria2's JSON-RPC (HTTP POST and WebSocket at /jsonrpc) for the session named by --rpc-session, \
            so aria2 front ends and `downloadkit session` see the same tasks.
            """)

    @OptionGroup var options: DaemonArguments

    @OptionGroup(title: "aria2 JSON-RPC") var rpc: RPCOptions

    @Option(name: .customLong("rpc-session"), help: "The session whose tasks aria2 JSON-RPC shows and adds to (default aria2).")
    var rpcSession = "aria2"

    func run() async throws {
        guard rpc.rpcListen != nil else {
            try await options.run()
            return
        }
        let rpc = self.rpc
        let session = rpcSession
        try await options.run(frontEnd: { registry in
            let host = try await registry.host(session)
            guard let server = try rpc.makeServer(manager: host.manager) else { return nil }
            let serving = Task {
                try await server.run()
                // aria2.shutdown / forceShutdown: the daemon stops as on SIGTERM (every transfer checkpointed).
                if server.stoppedOverRPC { kill(getpid(), SIGTERM) }
            }
            await server.waitUntilReady()
            FileHandle.standardError.write(
                Data("downloadkit daemon: aria2 JSON-RPC on \(server.host):\(server.port)/jsonrpc (session \(session))\n".utf8))
            return {
                await server.shutdown()
                _ = await serving.result
            }
        })
    }
}
