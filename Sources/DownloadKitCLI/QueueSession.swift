import ArgumentParser
import DownloadKit
import DownloadKitManager
import Foundation
import HTTPClient

/// One queue command's hold on a state directory: the exclusive lock and the manager opened on it.
///
/// The manager is opened with the network reported unreachable, so nothing starts while a command only
/// looks at or edits the queue (and `run` can subscribe to everything before the first transfer starts),
/// and with `startsRestoredTasks`, so tasks that were waiting or running when a previous run stopped or
/// was killed stay in the waiting line instead of being rewritten as paused.
public final class QueueSession: Sendable {
    let manager: DownloadManager
    /// Drives the manager's network status: `run` reports the network reachable to start transfers.
    let network: ManualNetworkMonitor
    private let lock: QueueLock

    private init(manager: DownloadManager, network: ManualNetworkMonitor, lock: QueueLock) {
        self.manager = manager
        self.network = network
        self.lock = lock
    }

    static func open(
        _ stateDirectory: String, configuration: DownloadManagerConfiguration = DownloadManagerConfiguration()
    ) async throws -> QueueSession {
        do {
            // 0700: the task store keeps the tasks' URLs with their userinfo (docs/NETWORKING-AUTH.md).
            try FileManager.default.createDirectory(
                atPath: stateDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            QueueOutput.error("error: cannot create the state directory \(stateDirectory): \(error.localizedDescription)")
            throw ExitCode(Exit.fileSystem)
        }
        let lock = try QueueLock.acquire(in: stateDirectory)
        var configuration = configuration
        configuration.startsRestoredTasks = true
        let network = ManualNetworkMonitor(NetworkStatus(isReachable: false, isMetered: false))
        do {
            let manager = try await DownloadManager(
                stateDirectory: stateDirectory, configuration: configuration, networkMonitor: network)
            return QueueSession(manager: manager, network: network, lock: lock)
        } catch {
            lock.release()
            throw failure(error)
        }
    }

    /// Closes the manager (stopping transfers with their bytes kept, writing every row), then unlocks.
    func close() async {
        await manager.close()
        lock.release()
    }

    /// Prints an `error:` line for a manager error and returns the exit to throw.
    public static func failure(_ error: any Error) -> ExitCode {
        if let error = error as? DownloadManagerError {
            QueueOutput.error("error: \(error.detail)")
            return ExitCode(error.code == .storage ? Exit.fileSystem : Exit.failure)
        }
        QueueOutput.error("error: \(error)")
        return ExitCode(Exit.failure)
    }

    /// Opens the queue, resolves the selection, applies `body` to the ids, and closes.
    static func change(
        _ stateDirectory: String, _ selection: QueueTaskSelection,
        _ body: @Sendable (DownloadManager, [String]) async throws -> Void
    ) async throws {
        let session = try await open(stateDirectory)
        do {
            let ids = try await selection.resolve(in: session.manager)
            try await body(session.manager, ids)
        } catch let exit as ExitCode {
            await session.close()
            throw exit
        } catch {
            await session.close()
            throw failure(error)
        }
        await session.close()
    }
}

/// An exclusive `flock` on `<state>/queue.lock`, so one process at a time uses a state directory (two
/// managers on one task table would overwrite each other's rows). The kernel drops it when the process
/// dies, kill -9 included. The file holds the holder's pid for the error message.
final class QueueLock: Sendable {
    private let descriptor: Int32
    private let released = LockedValue(false)

    private init(descriptor: Int32) { self.descriptor = descriptor }

    static func acquire(in directory: String) throws -> QueueLock {
        let path = directory + "/queue.lock"
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            QueueOutput.error("error: cannot open \(path): \(String(cString: strerror(errno)))")
            throw ExitCode(Exit.fileSystem)
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            let holder = (try? String(contentsOfFile: path, encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            close(descriptor)
            if code == EWOULDBLOCK {
                let who = holder.isEmpty ? "another downloadkit queue process" : "another downloadkit queue process (pid \(holder))"
                QueueOutput.error(
                    "error: the queue in \(directory) is in use by \(who); `queue run` holds it until the queue is done (Ctrl-C stops it and checkpoints)")
            } else {
                QueueOutput.error("error: cannot lock \(path): \(String(cString: strerror(code)))")
            }
            throw ExitCode(Exit.failure)
        }
        let pid = Array("\(getpid())\n".utf8)
        if ftruncate(descriptor, 0) == 0 {
            _ = pid.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
        }
        return QueueLock(descriptor: descriptor)
    }

    /// Unlocks (closing the descriptor drops the `flock`).
    func release() {
        let first = released.withLock { done in
            defer { done = true }
            return !done
        }
        if first { close(descriptor) }
    }
}
