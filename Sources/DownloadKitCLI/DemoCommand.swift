import ArgumentParser
@_spi(DownloadKitInternal) import DownloadKit
import Foundation
import HTTPClient

struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Show a resumable download end to end, offline: serve, download, interrupt, resume, verify.",
        discussion: """
            Starts a small HTTP origin of its own on 127.0.0.1, downloads a generated file with a live
            progress bar, interrupts it part-way, resumes it from the partial file on disk (showing the
            offset and the Range request the server saw), verifies its SHA-256, and prints what happened.
            """
    )

    @Option(help: "Size of the generated file in MiB.")
    var size: Int = 256

    @Option(help: "Interrupt after this fraction of the file (0.05 to 0.95).")
    var interruptAt: Double = 0.4

    @Option(help: "Serve at most this many MiB per second, so the progress is visible (0 = unlimited).")
    var rate: Int = 96

    @Option(help: "Directory for the downloaded file (default: a new temporary directory).")
    var directory: String?

    mutating func validate() throws {
        guard size >= 1 && size <= 16384 else { throw ValidationError("--size must be 1 to 16384 MiB") }
        guard interruptAt >= 0.05 && interruptAt <= 0.95 else { throw ValidationError("--interrupt-at must be 0.05 to 0.95") }
        guard rate >= 0 else { throw ValidationError("--rate must be 0 or more") }
    }

    func run() async throws {
        let bytes = Int64(size) << 20
        let origin = try DemoOrigin(size: bytes, seed: DemoPattern.seed, bytesPerSecond: rate << 20)
        defer { origin.shutdown() }
        let url = origin.url
        let folder = directory ?? NSTemporaryDirectory() + "downloadkit-demo-\(getpid())"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let destination = folder + "/demo.bin"
        try? FileManager.default.removeItem(atPath: destination)

        say("1. serving a generated \(size) MiB file at \(url)")
        let expected = Self.sha256OfPattern(bytes: bytes)
        say("   its SHA-256 is \(expected)")

        let request = DownloadRequest(
            url: url, destination: .file(destination),
            checksum: Checksum(algorithm: .sha256, expectedHex: expected))
        let mode: ProgressMode = isatty(STDERR_FILENO) == 1 ? .bar : .none

        say("2. downloading to \(destination), interrupting at \(Int(interruptAt * 100))%")
        let first = Download(request)
        let firstRenderer = ProgressRenderer(mode: mode, count: 1)
        first.start()
        let threshold = Int64(Double(bytes) * interruptAt)
        var pausedAt: Int64 = 0
        var resumeData: Data?
        for await event in first.events {
            await firstRenderer.handle(event, index: 0, url: url)
            if case .progress(let progress) = event, progress.bytesReceived >= threshold, resumeData == nil {
                resumeData = await first.pause()
                pausedAt = first.progress.bytesReceived
            }
        }
        await firstRenderer.finish()
        let partial = (try? FileManager.default.attributesOfItem(atPath: WorkingFiles(besideFile: destination).partial)[.size] as? Int64) ?? nil
        guard let partial, partial > 0 else {
            say("the first run finished before the interruption point; try a larger --size or lower --rate")
            throw ExitCode.failure
        }
        say("   interrupted: \(partial) bytes are on disk in \(destination).dkpart (resume info in \(destination).dkresume)")
        say("   nothing exists at \(destination) yet: \(FileManager.default.fileExists(atPath: destination) ? "WRONG" : "correct")")
        _ = pausedAt
        _ = resumeData

        say("3. running the same download again: it continues from the partial file")
        let second = Download(request)
        let secondRenderer = ProgressRenderer(mode: mode, count: 1)
        second.start()
        for await event in second.events {
            await secondRenderer.handle(event, index: 0, url: url)
        }
        await secondRenderer.finish()
        let result: DownloadResult
        do {
            result = try await second.result()
        } catch {
            FileHandle.standardError.write(Data("error: \(error.detail)\n".utf8))
            throw ExitCode(Exit.status(for: error))
        }
        let ranges = origin.rangesSeen
        say("   resumed from byte \(result.resumedFrom); the server saw: \(ranges.isEmpty ? "no Range request" : ranges.map { "Range: \($0)" }.joined(separator: ", "))")
        say("4. verified: SHA-256 \(result.checksumHex ?? "?") matches")
        let transferred = partial + result.bytesTransferred
        say("""
            done: \(result.path) (\(result.bytes) bytes)
                  bytes over the network: \(partial) + \(result.bytesTransferred) = \(transferred) \
            (\(transferred == result.bytes ? "no byte fetched twice" : "\(transferred - result.bytes) bytes fetched twice"))
                  left beside it: \(leftovers(folder: folder, keeping: "demo.bin"))
            """)
    }

    private func leftovers(folder: String, keeping name: String) -> String {
        let others = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter { $0 != name }
        return others.isEmpty ? "nothing (no temp or resume-info files)" : others.joined(separator: ", ")
    }

    private func say(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    /// SHA-256 of the generated file, computed independently of the download.
    static func sha256OfPattern(bytes: Int64) -> String {
        let digest = DKDigest(.sha256)
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
        defer { chunk.deallocate() }
        var offset: Int64 = 0
        while offset < bytes {
            let count = Int(min(Int64(chunk.count), bytes - offset))
            let slice = UnsafeMutableRawBufferPointer(rebasing: chunk[0..<count])
            DemoPattern.fill(slice, offset: offset)
            digest.update(UnsafeRawBufferPointer(slice))
            offset += Int64(count)
        }
        return DKDigest.hex(digest.finalize())
    }
}
