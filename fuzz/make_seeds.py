#!/usr/bin/env python3
"""Writes the seed corpora of the text- and header-based fuzz targets into fuzz/corpus/<target>/.

Each seed starts with the target's selector byte(s) (see each *_fuzz.cc). The
codec seeds come from make_codec_seeds.py, the checkpoint seeds from the
frugal_make_checkpoint_seeds program (make fuzz-seeds). Inputs the fuzzers
found interesting are kept in the corpus too; this script only (re)writes the
seed_* files.

Usage: make_seeds.py [REPO_ROOT]
"""
import gzip
import json
import os
import struct
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed_" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def head(path, lines):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return "".join(f.readlines()[:lines])


def wire():
    # frames, self, world, payload choice (even: the announced length), header.
    def header(kind, src, world, tag, length, magic=0x31475246, version=3):
        return struct.pack("<IBBHIIQQ", magic, version, kind, 0, src, world, tag, length)
    write("wire", "data", bytes([3, 0, 4, 0]) + header(1, 2, 4, 77, 4096))
    write("wire", "data_part", bytes([3, 0, 4, 0]) + header(4, 2, 4, 77, 4096))
    write("wire", "goodbye", bytes([3, 1, 2, 0]) + header(2, 0, 2, 0, 0))
    write("wire", "ack", bytes([3, 3, 8, 0]) + header(3, 5, 8, 1 << 40, 0))
    write("wire", "bad_magic", bytes([3, 0, 2, 0]) + header(1, 1, 2, 0, 8, magic=0x12345678))
    write("wire", "two_frames", bytes([2, 0, 2, 1]) + header(1, 1, 2, 0, 1))


def control():
    telemetry = ('{"compute_s":0.5,"iterations":10,"link_bytes":1.5e6,"link_busy_s":0.25,"optimizer_s":0.01,'
                 '"rank":1,"samples":640,"sparsify_s":0.02,"wait_s":0.1,"window_s":1.0}')
    decision = ('{"bandwidth_mbit":100.0,"batch_sizes":[32,64],"density":0.01,"effective_iteration":50,'
                '"lr_scale":1.0,"predicted_iteration_s":0.2,"reason":"link slower"}')
    write("control", "telemetry", b"\x00" + telemetry.encode())
    write("control", "decision", b"\x01" + decision.encode())
    write("control", "decision_no_batches", b"\x01" + decision.replace("[32,64]", "[]").encode())


def idx():
    images = bytes([0, 0, 8, 3]) + struct.pack(">III", 2, 3, 3) + bytes(range(18))
    labels = bytes([0, 0, 8, 1]) + struct.pack(">I", 4) + bytes([1, 2, 3, 9])
    write("idx", "images", b"\x00" + images)
    write("idx", "labels", b"\x00" + labels)
    write("idx", "images_gz", b"\x01" + gzip.compress(images, mtime=0))
    write("idx", "labels_gz", b"\x01" + gzip.compress(labels, mtime=0))


def csv():
    write("csv", "quoted", b"\x00" + b'a,b,"c, d"\n1,2,"x ""y"""\n\n3, 4 ,5\r\n')
    write("csv", "comments", b"\x03" + b"# note\n# GPUs,time\n8,1.5e3\n# skipped\n16,inf\n")
    write("csv", "bom", b"\x01" + "\ufeffkey,value\nx,nan\ny,-0\n".encode())


def sim():
    write("sim", "hardware", b"\x00" + head("data/planner/this-machine.toml", 200).encode())
    write("sim", "hardware_base", b"\x00" + b'base = "a100-80g"\nname = "mine"\n[network]\ninter_node_gbps = 25.0\n')
    write("sim", "measurements", b"\x01" + head("src/sim/testdata/narayanan2021_table1.csv", 8).encode())
    write("sim", "measurements_sel", b"\x01" + head("src/sim/testdata/korthikanti2022_table5_selective.csv", 6).encode())
    write("sim", "frugal_runs", b"\x02" + head("data/planner/frugal_runs.csv", 5).encode())
    write("sim", "profile", b"\x03" + head("data/planner/mlp_ops.csv", 6).encode())
    write("sim", "schedule", b"\x04interleaved")


def sched():
    write("sched", "workload", b"\x00" + b"name,time,application,num_replicas,batch_size\n"
          b"cifar10-0,107,cifar10,6,2048\ndeepspeech2-1,110,deepspeech2,6,320\n")
    write("sched", "throughput", b"\x01" + b"application,total_samples,num_gpus,samples_per_s\n"
          b"mlp,1000,1,100\nmlp,1000,4,300\n")
    write("sched", "philly", b"\x02" + b"timestamp,duration,num_gpus,gpu_time,cluster\n"
          b"2017-10-09 07:01:55,66.0,1,66.0,11cb48\n2017-10-09 06:13:03,2951.0,2,5902.0,6214e9\n")
    write("sched", "planner_apps", b"\x03" + b"application,model,hardware,total_samples\n"
          b"resnet,resnet18,a100-80g,1e6\ngpt,gpt-125m,h100,2e6\n")


def run_config():
    write("run_config", "typical", 'model = "cnn"\nworkers = 4\ndensity = 0.01\nlr = 0.1\nsparsifier = "block"\n'
          'value_encoding = "fp16"\nstaleness = 1\ntimeout_s = 60.0\ncluster = "siteA"\nadapt = "off"\n')
    write("run_config", "kebab_and_bools", 'batch-size = 64\nnesterov = true\nlr_schedule = "cosine"\n'
          'checkpoint_every = 100\nkeep_checkpoints = 3\nrank = -1\ndgc_momentum = 0.9\n')
    write("run_config", "bad_values", 'density = nan\nlr = -1e308\nworkers = 99999999999999\nbucket_mb = 0.0\n'
          'optimizer = "sgd2"\n[table]\nx = 1\n')


def rendezvous():
    # selector (0 rendezvous registration, 1 its table, 2 elastic / 3 plain
    # membership registration, 4 membership table, 5 field readers, 6 heartbeat), world
    # byte (1 + b % 16; the high nibble marks taken ranks for 0), frame.
    peers = '[{"rank":0,"endpoint":"tcp://10.0.0.1:5000","cluster":"a","public_key":""},' \
            '{"rank":1,"endpoint":"tcp://10.0.0.2:5000","cluster":"b","public_key":"k"}]'
    write("rendezvous", "registration", b"\x00\x23" + b'{"rank":1,"endpoint":"tcp://1.2.3.4:5","cluster":"a"}')
    write("rendezvous", "registration_any", b"\x00\x03" + b'{"rank":-1,"endpoint":"tcp://h:1","cluster":"b"}')
    write("rendezvous", "table", b"\x01\x00" + ('{"version":1,"rank":1,"peers":%s}' % peers).encode())
    write("rendezvous", "table_error", b"\x01\x00" + b'{"error":"late","code":"timeout"}')
    write("rendezvous", "join", b"\x02\x00" + b'{"op":"register","id":"w-1","rank":-1,"endpoint":"tcp://h:1",'
          b'"cluster":"a","snapshots":[10,20],"join":true}')
    write("rendezvous", "plain", b"\x03\x00" + b'{"rank":2,"endpoint":"tcp://h:1","cluster":"a"}')
    write("rendezvous", "generation", b"\x04\x00" + ('{"version":1,"generation":3,"rank":0,"peers":%s,'
          '"restore":20,"joined":[1]}' % peers).encode())
    write("rendezvous", "generation_failed", b"\x04\x00" + b'{"error":"gone","code":"failed"}')
    write("rendezvous", "heartbeat", b"\x06\x00" + b'{"op":"heartbeat","id":"w-1","generation":3,"iteration":41,'
          b'"member":{"rank":1,"endpoint":"tcp://h:1","cluster":"a","world":2}}')
    write("rendezvous", "heartbeat_joiner", b"\x06\x00" + b'{"op":"heartbeat","id":"w-2","generation":0,"iteration":-1}')
    write("rendezvous", "fields", b"\x05\x04" + b'{"n":3,"rank":2,"endpoint":"tcp://0.0.0.0:7","cluster":"c",'
          b'"host":"10.1.1.1"}')


def coordinator():
    # world byte, min-workers byte, timing byte, then one request per line:
    # a client byte and the JSON frame (coordinator_fuzz.cc).
    def reg(client, wid, rank, join=False, snaps="[]"):
        return bytes([client]) + ('{"op":"register","id":"%s","rank":%d,"endpoint":"tcp://h:%d","cluster":"a",'
                                  '"snapshots":%s,"join":%s}' % (wid, rank, client + 1, snaps,
                                                                 "true" if join else "false")).encode()
    def beat(client, wid, it):
        return bytes([client]) + ('{"op":"heartbeat","id":"%s","generation":1,"iteration":%d}' % (wid, it)).encode()
    form = [reg(0, "w0", -1), reg(1, "w1", -1)]
    write("coordinator", "form", b"\x01\x00\x00" + b"\n".join(form))
    write("coordinator", "join", b"\x01\x00\x00" + b"\n".join(form + [
        beat(0, "w0", 5), reg(2, "w2", -1, join=True), beat(2, "w2", 0),
        reg(0, "w0", -1, snaps="[5]"), reg(1, "w1", -1, snaps="[5]"), b"\x03{\"op\":\"status\"}"]))
    write("coordinator", "leave_done", b"\x01\x00\x00" + b"\n".join(form + [
        b'\x00{"op":"leave","id":"w0"}', reg(1, "w1", -1, snaps="[1]"), b'\x00{"op":"done","id":"w0"}',
        b'\x01{"op":"done","id":"w1"}']))
    write("coordinator", "resize_stop", b"\x02\x00\x00" + b"\n".join(form + [
        reg(2, "w2", 2), b'\x05{"op":"resize","workers":1}', b'\x05{"op":"stop"}', b'\x05{"op":"bogus"}']))
    write("coordinator", "plain", b"\x01\x00\x00" + b'\x00{"rank":0,"endpoint":"tcp://h:1","cluster":"a"}\n'
          b'\x01{"rank":-1,"endpoint":"tcp://h:2","cluster":"b"}')
    write("coordinator", "adopt", b"\x01\x00\x00" + b'\x00{"op":"heartbeat","id":"w0","generation":4,"iteration":9,'
          b'"member":{"rank":0,"endpoint":"tcp://h:1","cluster":"a"}}\n\x01{"op":"status"}')
    write("coordinator", "lost", b"\x01\x00\x01" + b"\n".join(form + [beat(0, "w0", 1)]))
    write("coordinator", "probe_withdraw", b"\x01\x00\x00" + b"\n".join(form + [
        beat(0, "w0", 3), b'\x00{"op":"probe","id":"w0"}', b'\x01{"op":"withdraw","id":"w1"}',
        b'\x01{"op":"withdraw","id":"nobody"}', reg(0, "w0", -1, snaps="[1]")]))
    # A restarted coordinator (Note [Coordinator restart]): heartbeats that
    # carry their member's entry and world size, a join held meanwhile.
    def member_beat(client, wid, rank, world=3, gen=4):
        return bytes([client]) + ('{"op":"heartbeat","id":"%s","generation":%d,"iteration":9,"member":{"rank":%d,'
                                  '"endpoint":"tcp://h:%d","cluster":"a","world":%d}}'
                                  % (wid, gen, rank, client + 1, world)).encode()
    write("coordinator", "recover", b"\x01\x00\x00" + b"\n".join([
        member_beat(0, "w0", 0), reg(3, "j", -1, join=True), member_beat(1, "w9", 1, world=2),
        member_beat(2, "w2", 2), member_beat(1, "w1", 1), reg(0, "w0", -1, snaps="[9]"), b"\x05{\"op\":\"status\"}"]))
    write("coordinator", "recover_lost", b"\x01\x00\x01" + b"\n".join([
        member_beat(0, "w0", 0), member_beat(1, "w1", 1), reg(0, "w0", -1, snaps="[9]")]))


def cluster_api():
    # selector (0 job submission, 1 agent heartbeat, 2 the server's reply), JSON body.
    def body(selector, value):
        return bytes([selector]) + (value if isinstance(value, str) else json.dumps(value)).encode()
    job = {"name": "mlp-a", "config_toml": 'model = "mlp"\nlr = 0.1\n', "min_workers": 2, "max_workers": 4,
           "max_steps": 200, "profile": "mlp/b64"}
    write("cluster_api", "submission", body(0, job))
    write("cluster_api", "submission_unknown_field", body(0, dict(job, max_worker=8)))
    # A key with a line break: the reason that names it must still be one line.
    write("cluster_api", "submission_key_newline", body(0, dict(job, **{"max_steps\nx": 1})))
    write("cluster_api", "submission_wrong_type", body(0, dict(job, min_workers="two", max_workers=2.5)))
    write("cluster_api", "submission_nested", body(0, "[" * 40 + "]" * 40))
    sample = {"job_id": 1, "step": 20, "time": 0, "workers": 4, "global_batch": 256, "loss": 2.0, "accuracy": -1,
              "samples_per_s": 300.5}
    write("cluster_api", "heartbeat", body(1, {
        "node": "host-a", "slots": 4, "running": ["job-1-g1-c", "job-1-g1-w0"],
        "exited": [{"task_id": "job-1-g0", "exit_code": 137}], "samples": [sample, dict(sample, loss=None)],
        "endpoints": [{"task_id": "job-1-g1-c", "endpoint": "tcp://10.0.0.2:5555"}]}))
    write("cluster_api", "heartbeat_bad_sample", body(1, {"node": "h", "slots": 1, "samples": [{"job_id": 1, "los": 2}]}))
    task = {"task_id": "job-1-g1-c", "job_id": 1, "generation": 1, "workers": 2, "args": ["train", "--config", "{config}"],
            "config_toml": 'model = "mlp"\n', "resume_run": "job-1", "resume_args": ["--steps", "10"],
            "resume_appends": False, "reports_endpoint": True, "reads_metrics": True, "job_public_key": "",
            "job_secret_key": "", "insecure_transport": False}
    write("cluster_api", "reply", body(2, {"node_id": 1, "tasks": [task], "superseded": ["job-1-g0"]}))


def main():
    wire()
    rendezvous()
    coordinator()
    control()
    idx()
    csv()
    sim()
    sched()
    run_config()
    cluster_api()


if __name__ == "__main__":
    main()
