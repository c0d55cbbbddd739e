import Foundation

/// Runs helper programs (openssl, nginx -t) and finds executables.
public enum ProcessRunner {
    /// The outcome of a finished process.
    public struct Result: Sendable {
        /// The exit status (or the terminating signal number when `terminatedBySignal`).
        public var status: Int32
        /// Whether the process ended because of a signal.
        public var terminatedBySignal: Bool
        /// Standard output and standard error, interleaved, decoded as UTF-8 (lossy).
        public var output: String
        /// Whether the process exited normally with status 0.
        public var succeeded: Bool { !terminatedBySignal && status == 0 }
    }

    /// Runs `executable` with `arguments` to completion and captures its combined output.
    ///
    /// - Parameters:
    ///   - executable: An absolute path, or a bare name looked up with ``findExecutable(_:)``.
    ///   - arguments: The arguments, without the program name.
    ///   - currentDirectory: The working directory, or `nil` to inherit.
    /// - Throws: ``OriginError`` when the program cannot be found or launched. A non-zero exit status is
    ///   not an error; inspect ``Result/succeeded``.
    @discardableResult
    public static func run(_ executable: String, _ arguments: [String], currentDirectory: String? = nil) throws -> Result {
        guard let path = executable.hasPrefix("/") ? executable : findExecutable(executable) else {
            throw OriginError("finding \(executable)", detail: "not found in PATH, /usr/sbin, /usr/local/sbin or /sbin")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        if let currentDirectory { process.currentDirectoryURL = URL(fileURLWithPath: currentDirectory) }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            throw OriginError("launching \(path)", detail: "\(error)")
        }
        // Read before waiting: a child whose output exceeds the pipe buffer would otherwise block forever.
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(
            status: process.terminationStatus,
            terminatedBySignal: process.terminationReason == .uncaughtSignal,
            output: String(decoding: data, as: UTF8.self)
        )
    }

    /// The absolute path of an executable named `name`, searching `PATH` and then the sbin directories
    /// (which are often missing from a non-root `PATH`, and are where nginx lives).
    public static func findExecutable(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        let directories = path.split(separator: ":").map(String.init) + ["/usr/local/sbin", "/usr/sbin", "/sbin"]
        for directory in directories where !directory.isEmpty {
            let candidate = directory.hasSuffix("/") ? directory + name : directory + "/" + name
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}
