import DownloadKit
@testable import DownloadKitManager
import Foundation
import Testing

/// The manager's task table keeps its indexes true through every change (TaskTable).
@Suite("Task table")
struct TaskTableTests {
    private func task(_ id: String, _ url: String, fileID: String? = nil, group: String? = nil, created: Double = 0)
        -> ManagedTask
    {
        let date = Date(timeIntervalSince1970: created)
        return ManagedTask(
            id: id, originalURL: url, currentURL: url, fileID: fileID, destination: .file("/tmp/" + id), path: nil,
            state: .waiting, bytesReceived: 0, totalBytes: nil, priority: .normal, queueOrder: 0, group: group,
            checksum: nil, headers: [:], metadata: [:], requiresUnmeteredNetwork: false, rateLimit: nil, error: nil,
            createdAt: date, updatedAt: date, finishedAt: nil)
    }

    @Test("a task that moves from one current URL to the next is found by its original and its newest, not the one it left")
    func currentURLMoves() {
        var table = TaskTable()
        var a = task("a", "http://o/a")
        table.insert(a)
        a.currentURL = "http://b/redirected"
        table.update(a)
        #expect(table.id(forURL: "http://b/redirected") == "a")
        a.currentURL = "http://c/refreshed"
        table.update(a)
        #expect(table.id(forURL: "http://c/refreshed") == "a")
        #expect(table.id(forURL: "http://b/redirected") == nil)
        #expect(table.id(forURL: "http://o/a") == "a")
        // A URL another task holds stays that task's.
        table.insert(task("d", "http://d/d"))
        a.currentURL = "http://d/d"
        table.update(a)
        #expect(table.id(forURL: "http://d/d") == "d")
        a.currentURL = "http://o/a"
        table.update(a)
        #expect(table.id(forURL: "http://d/d") == "d")
        #expect(table.id(forURL: "http://o/a") == "a")
    }

    @Test("the newest task of a URL is found, in whatever order they are restored")
    func newestWins() {
        for order in [["old", "new"], ["new", "old"]] {
            var table = TaskTable()
            for id in order { table.insert(task(id, "http://o/same", created: id == "new" ? 2 : 1)) }
            #expect(table.id(forURL: "http://o/same") == "new")
            #expect(table.isNewestOfItsURL(table["new"]!))
            #expect(!table.isNewestOfItsURL(table["old"]!))
        }
    }

    @Test("file identifiers and groups follow a change and a removal")
    func fileIDsAndGroups() {
        var table = TaskTable()
        var a = task("a", "http://o/a", fileID: "f1", group: "g1")
        table.insert(a)
        table.insert(task("b", "http://o/b", group: "g1"))
        #expect(table.members(ofGroup: "g1").map(\.id) == ["a", "b"])
        a.fileID = "f2"
        a.group = "g2"
        table.update(a)
        #expect(table.id(forFileID: "f1") == nil)
        #expect(table.id(forFileID: "f2") == "a")
        #expect(table.members(ofGroup: "g1").map(\.id) == ["b"])
        #expect(table.members(ofGroup: "g2").map(\.id) == ["a"])
        table.remove("a")
        #expect(table["a"] == nil)
        #expect(table.id(forURL: "http://o/a") == nil)
        #expect(table.id(forFileID: "f2") == nil)
        #expect(table.members(ofGroup: "g2").isEmpty)
        // A changed value of a task removed meanwhile does not bring it back.
        table.update(a)
        #expect(table["a"] == nil)
        #expect(table.count == 1)
    }
}
