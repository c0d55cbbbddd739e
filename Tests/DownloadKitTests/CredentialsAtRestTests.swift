import DownloadKit
import DownloadKitManager
import Foundation
import Glibc
import Testing
import TestOrigin

/// Credentials at rest and in flight (issue #13, defect 7): URL passwords never reach resume
/// records or pause data, caller-marked credential headers never cross origins, and the manager's
/// state is private.
@Suite(.timeLimit(.minutes(2)))
struct CredentialsAtRestTests {
    @Test func markedCredentialHeadersNeverFollowACrossOriginRedirect() async throws {
        let a = try FaultOrigin()
        let b = try FaultOrigin()
        defer {
            a.shutdown()
            b.shutdown()
        }
        b.serve("/file", .resource(Resource(size: 64 << 10, seed: 71)))
        a.serve("/start", .redirect(status: 302, location: b.url("/file")))
        let dir = try ScratchDirectory()
        var request = DownloadRequest(
            url: a.url("/start"), destination: .file(dir.file("c.bin")), headers: ["X-Api-Key": "k1", "X-Trace": "t"])
        request.credentialHeaderNames = ["x-api-key"]
        let (result, _) = await runDownload(request)
        _ = try result.get()
        #expect(a.requests("/start").first?.header("X-Api-Key") == "k1")
        let atB = try #require(b.requests("/file").first)
        #expect(atB.header("X-Api-Key") == nil)
        #expect(atB.header("X-Trace") == "t")
    }

    @Test func urlPasswordsNeverReachResumeRecordsOrPauseData() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/s", .resource(Resource(size: 8 << 20, seed: 72, faults: [.stallAfter(bytes: 1 << 20, seconds: 120, times: 10)])))
        let dir = try ScratchDirectory()
        let url = origin.url("/s").replacingOccurrences(of: "http://", with: "http://user:hunter2@")
        let request = DownloadRequest(url: url, destination: .file(dir.file("s.bin")))
        let download = Download(request, configuration: testConfiguration())
        download.start()
        var data: Data?
        for await event in download.events {
            if case .progress(let progress) = event, progress.bytesReceived > 0, data == nil { data = await download.pause() }
        }
        let pauseData = try #require(data)
        let record = try #require(FileManager.default.contents(atPath: dir.file("s.bin.dkresume")))
        for bytes in [pauseData, record] {
            #expect(bytes.range(of: Data("hunter2".utf8)) == nil)
            let info = try ResumeInfo.decode(bytes)
            #expect(info.originalURL == origin.url("/s"))
        }
        // Resuming with the URL that carries the password continues the partial.
        origin.serve("/s", .resource(Resource(size: 8 << 20, seed: 72)))
        var resumed = request
        resumed.resumeData = pauseData
        let (result, _) = await runDownload(resumed)
        #expect(try result.get().resumedFrom > 0)
        #expect(fileMatchesPattern(dir.file("s.bin"), size: 8 << 20, seed: 72))
    }

    @Test func managerStateDirectoryIsPrivateAndItsDatabaseTooAt0600() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.file("state")
        let manager = try await DownloadManager(stateDirectory: state)
        _ = manager
        var st = stat()
        #expect(stat(state, &st) == 0 && st.st_mode & 0o777 == 0o700)
        for name in try FileManager.default.contentsOfDirectory(atPath: state) where name.hasPrefix("tasks.sqlite") {
            #expect(stat(state + "/" + name, &st) == 0 && st.st_mode & 0o777 == 0o600, "\(name)")
        }
        #expect(stat(state + "/tasks.sqlite", &st) == 0 && st.st_mode & 0o777 == 0o600)
    }
}
