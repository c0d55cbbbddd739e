import ArgumentParser
import Dispatch
import DownloadKit
import DownloadKitManager
import DownloadKitRPC
import Foundation

/// `downloadkit rpc`: a DownloadManager on a state directory, driven over aria2's JSON-RPC in the
/// foreground (the standalone form of `downloadkit daemon --rpc-listen …`).
struct RPCCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rpc",
        abstract: "Serve the queue over aria2-compatible JSON-RPC (for aria2 front ends) in the foreground.",
        discussion: """
            Opens the queue's state directory (the same as `downloadkit queue`; one process at a time) and \
            serves aria2's JSON-RPC at http://HOST:PORT/jsonrpc (POST) and ws://HOST:PORT/jsonrpc \
            (WebSocket, with aria2.onDownload* notifications). Tasks that were waiting or running continue. \
            SIGTERM or Ctrl-C stops the listener, checkpoints every transfer and exits 0. See docs/RPC.md.
            """
    )

    @Option(name: .customLong("state"), help: "The state directory (default: $XDG_STATE_HOME/downloadkit or ~/.local/state/downloadkit).")
    var state: String?

    @OptionGroup var rpc: RPCOptions

    @Option(name: .customLong("max-concurrent"), help: "At most this many files at a time (aria2's max-concurrent-downloads).")
    var maxConcurrent: Int = 5

    mutating func validate() throws {
        if rpc.rpcListen == nil { throw ValidationError("--rpc-listen HOST:PORT is required") }
        if maxConcurrent < 1 { throw ValidationError("--max-concurrent must be at least 1") }
    }

    func run() async throws {
        let stateDirectory = QueueCommand.defaultStateDirectory(state)
        // 0700 as `queue` makes it: the task store keeps the tasks' URLs with their userinfo (docs/NETWORKING-AUTH.md).
        try FileManager.default.createDirectory(
            atPath: stateDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let lock = try QueueLock.acquire(in: stateDirectory)
        defer { lock.release() }
        let manager = try await DownloadManager(
            stateDirectory: stateDirectory,
            configuration: DownloadManagerConfiguration(maxConcurrentDownloads: maxConcurrent, startsRestoredTasks: true))
        guard let server = try rpc.makeServer(manager: manager) else { return }
        let sources = [SIGTERM, SIGINT].map { number -> any DispatchSourceSignal in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { Task { await server.shutdown() } }
            source.resume()
            return source
        }
        defer { sources.forEach { $0.cancel() } }
        Task {
            await server.waitUntilReady()
            FileHandle.standardError.write(Data("downloadkit rpc: listening on \(server.host):\(server.port)/jsonrpc\n".utf8))
        }
        do {
            try await server.run()
        } catch {
            await manager.close()
            FileHandle.standardError.write(Data("error: the RPC listener failed: \(error)\n".utf8))
            throw ExitCode(1)
        }
        await manager.close()
    }
}
