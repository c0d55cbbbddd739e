import Foundation
import Glibc
import HTTPClient
import HTTPWire
import Testing
import TestOrigin

@testable import DownloadKit
import DownloadKitManager

/// Issue #44: another user plants a file or a link beside a destination in a directory both can write
/// (a sticky 1777 one, and a root-owned group-writable 0775 one, where the kernel never protects); root
/// then downloads there. The planted name costs at most a refused or restarted download, never another
/// file's bytes. nobody is played for real (`setpriv`, ``OtherUser``).
@Suite(.timeLimit(.minutes(2)))
struct PlantedFileTests {
    static let size: Int64 = 256 << 10

    /// 1: a genuine record planted by nobody names root's 0600 `secret.txt` in the same directory as its
    /// partial. It is not adopted: the download starts over, `secret.txt` keeps its bytes and mode.
    @Test(arguments: SharedDirectory.Kind.allCases)
    func aRecordPlantedByAnotherUserIsNotAdopted(_ kind: SharedDirectory.Kind) async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/r", .resource(Resource(size: Self.size, seed: 441)))
        let dir = try SharedDirectory(kind)
        let secret = try VictimFile(dir.file("secret.txt"), bytes: Array("root's secret, fifty-two bytes long, do not leak it!".utf8))
        #expect(secret.bytes.count == 52)
        try plantRecord(naming: secret.path, bytes: 52, url: origin.url("/r"), at: dir.file("dl.bin.dkresume"), in: dir)

        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/r"), destination: .file(dir.file("dl.bin"))))
        let finished = try result.get()
        #expect(secret.damage == nil, "\(secret.damage ?? "")")
        #expect(finished.resumedFrom == 0, "\(reasons(events))")
        #expect(fileMatchesPattern(dir.file("dl.bin"), size: Self.size, seed: 441))
        #expect(origin.requests("/r").allSatisfy { $0.header("Range") == nil })
    }

    /// 2: a link planted by nobody where a segmented download's journal goes, to a root file: the download
    /// is refused with `.untrustedFile` naming the journal; the root file keeps its bytes and mode.
    @Test(arguments: SharedDirectory.Kind.allCases)
    func aJournalLinkPlantedByAnotherUserIsRefused(_ kind: SharedDirectory.Kind) async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/s", .resource(Resource(size: 4 << 20, seed: 442)))
        let dir = try SharedDirectory(kind)
        let private_ = try ScratchDirectory()
        let victim = try VictimFile(private_.file("victim"), bytes: Array(repeating: 0x5A, count: 4096))
        try OtherUser.plantLink(at: dir.file("out.bin.dkjournal"), to: victim.path)

        var configuration = testConfiguration()
        configuration.connections = 4
        configuration.minimumSegmentSize = 256 << 10
        let (result, _) = await runDownload(
            DownloadRequest(url: origin.url("/s"), destination: .file(dir.file("out.bin"))), configuration: configuration)
        #expect(victim.damage == nil, "\(victim.damage ?? "")")
        #expect(isSymbolicLink(dir.file("out.bin.dkjournal")), "the planted link is not ours to remove")
        guard case .failure(let error) = result else {
            Issue.record("the download went through a planted journal link")
            return
        }
        #expect(error.code == .untrustedFile, "\(error)")
        #expect(error.detail.contains(dir.file("out.bin.dkjournal")), "\(error.detail)")
        #expect(error.detail.contains("symbolic link"), "\(error.detail)")
    }

    /// A partial planted by nobody (a regular file of nobody's) is refused with `.untrustedFile` naming it:
    /// root never writes a download into another user's file (nobody could change it, then, or read it).
    @Test(arguments: SharedDirectory.Kind.allCases)
    func aPartialPlantedByAnotherUserIsRefused(_ kind: SharedDirectory.Kind) async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/p", .resource(Resource(size: Self.size, seed: 443)))
        let dir = try SharedDirectory(kind)
        try OtherUser.run(["/usr/bin/touch", dir.file("dl.bin.dkpart")])

        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/p"), destination: .file(dir.file("dl.bin"))))
        #expect(fileOwner(dir.file("dl.bin.dkpart")) == OtherUser.id)
        #expect(fileOwner(dir.file("dl.bin")) == nil, "nothing is downloaded into nobody's file")
        guard case .failure(let error) = result else {
            Issue.record("the download wrote into another user's partial")
            return
        }
        #expect(error.code == .untrustedFile, "\(error)")
        #expect(error.detail.contains(dir.file("dl.bin.dkpart")) && error.detail.contains("another user"), "\(error.detail)")
    }

    /// 3: a link planted by nobody at the cookie jar's temporary name `<jar>.tmp-<pid>`: the jar is written
    /// through a fresh name instead; the root file behind the link keeps its bytes and mode.
    @Test(arguments: SharedDirectory.Kind.allCases)
    func aCookieJarTemporaryLinkPlantedByAnotherUserIsLeftAlone(_ kind: SharedDirectory.Kind) throws {
        let dir = try SharedDirectory(kind)
        let private_ = try ScratchDirectory()
        let victim = try VictimFile(private_.file("victim"), bytes: Array("root:x:0:0".utf8))
        let jarPath = dir.file("jar.txt")
        try OtherUser.plantLink(at: jarPath + ".tmp-\(getpid())", to: victim.path)

        let jar = CookieJar(
            cookies: [Cookie(name: "session", value: "s3", domain: "example.com", hostOnly: true)], persistencePath: jarPath)
        try jar.save()
        #expect(victim.damage == nil, "\(victim.damage ?? "")")
        #expect(isSymbolicLink(jarPath + ".tmp-\(getpid())"), "the planted link is not ours to remove")
        let saved = try #require(FileManager.default.contents(atPath: jarPath))
        #expect(String(decoding: saved, as: UTF8.self).contains("example.com"))
        #expect(try CookieJar.load(path: jarPath).map(\.name) == ["session"])
        #expect(fileOwner(jarPath) == geteuid())
        // Only the jar and nobody's link: no temporary name of ours is left behind.
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        #expect(names == ["jar.txt", "jar.txt.tmp-\(getpid())"])
    }

    /// The manager's cancel deletes the task's working files, and only those this user owns: a file nobody
    /// planted at the task's journal name stays (before, root removed it with the rest), the partial of
    /// ours goes.
    @Test(arguments: SharedDirectory.Kind.allCases)
    func cancellingATaskRemovesOnlyItsOwnWorkingFiles(_ kind: SharedDirectory.Kind) async throws {
        let dir = try SharedDirectory(kind)
        let state = try ScratchDirectory()
        let destination = dir.file("x.bin")
        try OtherUser.run(["/usr/bin/touch", destination + ".dkjournal"])
        #expect(FileManager.default.createFile(atPath: destination + ".dkpart", contents: Data("ours".utf8)))
        let manager = try await DownloadManager(stateDirectory: state.file("state"), configuration: managerConfiguration())
        let id = try await manager.enqueue(url: "http://127.0.0.1:1/x.bin", destination: .file(destination))
        try await manager.pause(taskID: id)
        try await manager.cancel(taskID: id)
        await manager.close()
        #expect(fileOwner(destination + ".dkjournal") == OtherUser.id, "nobody's file was removed")
        #expect(!FileManager.default.fileExists(atPath: destination + ".dkpart"), "our partial was kept")
    }

    /// The record's own temporary name: a file nobody planted at `<record>.tmp-<pid>` is neither written
    /// nor renamed into place (a record of nobody's would then be refused, and nobody would read ours).
    @Test func aRecordTemporaryNamePlantedByAnotherUserIsLeftAlone() throws {
        let dir = try SharedDirectory(.sticky)
        try OtherUser.run(["/usr/bin/touch", dir.file("x.dkresume.tmp-\(getpid())")])
        let info = ResumeInfo(originalURL: "http://example.com/x", tempFilePath: dir.file("x.dkpart"))
        try info.write(to: dir.file("x.dkresume"))
        #expect(fileOwner(dir.file("x.dkresume")) == geteuid())
        #expect(fileOwner(dir.file("x.dkresume.tmp-\(getpid())")) == OtherUser.id)
        #expect(FileManager.default.contents(atPath: dir.file("x.dkresume.tmp-\(getpid())"))?.isEmpty == true)
        if case .trusted(let read) = ResumeInfo.readRecord(at: dir.file("x.dkresume")) {
            #expect(read.originalURL == info.originalURL)
        } else {
            Issue.record("our own record is not trusted")
        }
    }

    /// A record is trusted only as ssh trusts a key: ours, not writable by others, one link, not a link.
    @Test func aRecordWritableByOthersLinkedOrALinkIsNotRead() throws {
        let dir = try ScratchDirectory()
        let info = ResumeInfo(originalURL: "http://example.com/x", tempFilePath: dir.file("x.dkpart"))
        try info.write(to: dir.file("mine.dkresume"))
        try info.write(to: dir.file("open.dkresume"))
        #expect(chmod(dir.file("open.dkresume"), 0o666) == 0)
        try info.write(to: dir.file("linked.dkresume"))
        #expect(link(dir.file("linked.dkresume"), dir.file("second-name")) == 0)
        #expect(symlink(dir.file("mine.dkresume"), dir.file("link.dkresume")) == 0)
        func outcome(_ name: String) -> String {
            switch ResumeInfo.readRecord(at: dir.file(name)) {
            case .absent: "absent"
            case .trusted: "trusted"
            case .refused(let why): why
            }
        }
        #expect(outcome("mine.dkresume") == "trusted")
        #expect(outcome("missing.dkresume") == "absent")
        #expect(outcome("open.dkresume").contains("\(dir.file("open.dkresume")): it is writable by its group or by others"))
        #expect(outcome("linked.dkresume").contains("\(dir.file("linked.dkresume")): it has another hard link"))
        #expect(outcome("link.dkresume").contains("\(dir.file("link.dkresume")): it is a symbolic link"))
    }

    /// A record of ours naming a partial in the working directory is still adopted (Apple's resume data
    /// names its own temp file): the checks refuse only what this user did not write.
    @Test func aRecordOfOursNamingOurPartialIsStillAdopted() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/o", .resource(Resource(size: Self.size, seed: 444)))
        let dir = try ScratchDirectory()
        try Data(TestPattern.bytes(offset: 0, count: 52, seed: 444)).write(to: URL(fileURLWithPath: dir.file("CFNetworkDownload_1.tmp")))
        var record = ResumeInfo(
            originalURL: origin.url("/o"), tempFilePath: dir.file("CFNetworkDownload_1.tmp"), bytesReceived: 52,
            entityTag: Resource.derivedETag(seed: 444, size: Self.size), totalLength: Self.size, acceptsRanges: true)
        record.bootID = FileSystem.bootID
        try record.write(to: dir.file("dl.bin.dkresume"))
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/o"), destination: .file(dir.file("dl.bin"))))
        #expect(try result.get().resumedFrom == 52, "\(reasons(events))")
        #expect(fileMatchesPattern(dir.file("dl.bin"), size: Self.size, seed: 444))
    }

    /// A destination planted by nobody is never reported as an unchanged download of ours
    /// (`.keepIfNotModified`): the executor finds it is not ours, and the machine downloads it again without
    /// asking; the same file of ours is asked about, and kept as it was found.
    @Test func aDestinationPlantedByAnotherUserIsNotKeptAsUnchanged() throws {
        let dir = try SharedDirectory(.sticky)
        try OtherUser.run(["/usr/bin/touch", dir.file("planted.bin")])
        try Data("ours".utf8).write(to: URL(fileURLWithPath: dir.file("ours.bin")))
        func answer(_ name: String) throws -> (ExistingFileRule.Found, EngineMachine.DestinationAction) {
            let url = "http://origin.test/k"
            let found = try #require(ExistingFileRule.Found.at(dir.file(name), partial: dir.file(name + ".dkpart")))
            let request = DownloadRequest(url: url, destination: .file(dir.file(name)))
            var machine = EngineMachine(url: try HTTPURL(url), settings: .init(request, DownloadConfiguration(), mirrors: []))
            return (found, machine.existingDestination(found, policy: .keepIfNotModified))
        }
        let planted = try answer("planted.bin")
        #expect(!planted.0.facts.ownedByUs)
        #expect(planted.1 == .download)
        let ours = try answer("ours.bin")
        #expect(ours.0.facts == ExistingFileRule.Facts(isRegularFile: true, partialExists: false, ownedByUs: true))
        guard case .askFirst = ours.1 else {
            Issue.record("our own file is not asked about")
            return
        }
        let kept = DownloadResult.kept(dir.file("ours.bin"), ours.0, url: "http://origin.test/k")
        #expect(kept.keptExistingFile && kept.bytes == 4)
    }

    /// Plants a genuine record (what the engine would write for `bytes` received into `partial`) at `path`,
    /// written by nobody.
    func plantRecord(naming partial: String, bytes: Int64, url: String, at path: String, in dir: SharedDirectory) throws {
        var record = ResumeInfo(
            originalURL: url, tempFilePath: partial, bytesReceived: bytes,
            entityTag: Resource.derivedETag(seed: 441, size: Self.size), totalLength: Self.size, acceptsRanges: true)
        record.bootID = FileSystem.bootID
        let staging = dir.file("staging.plist")
        try record.write(to: staging)
        #expect(chmod(staging, 0o644) == 0)
        try OtherUser.plantCopy(of: staging, at: path)
        try FileManager.default.removeItem(atPath: staging)
        #expect(fileOwner(path) == OtherUser.id)
    }
}
