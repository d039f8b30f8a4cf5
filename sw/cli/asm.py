"""``fdpu asm`` and ``fdpu disasm``: build a configuration image, and print one.

``fdpu asm (--layer NAME | --in-features C --out-features K | --weights W.npy) [--inputs X.npy]
[--density D] [--batch N] [--mode dense|sparse] [--rows R --cols C] [--seed S] [--pass P]
[-o IMAGE.npz] [--dot GRAPH.dot] [--listing]``
    Plan, build, validate, place and assemble pass ``P`` (default 0) of the layer; print the
    per-PE instruction counts; write the image (``.npz``), the graph (Graphviz DOT) and/or the
    listing.
``fdpu disasm IMAGE.npz``
    Check an image and print its listing (one line per configured slot, then the preloads).
"""

from sw.cli.options import add_array_args, add_layer_args, plan_layer, resolve
from sw.cli.output import check_outputs, replacing
from sw.compiler import dbuf_layout, graphs
from sw.compiler.asm import assemble, listing
from sw.compiler.image import load
from sw.compiler.place import place
from sw.spec.errors import FdpuError


def register(subparsers):
    """Add the ``asm`` and ``disasm`` commands."""
    parser = subparsers.add_parser(
        "asm", help="build the configuration image of an FC layer",
        description="Plan, build, validate, map and assemble an FC layer into a binary "
                    "configuration image (instructions, preloads, Dbuf contents).")
    add_layer_args(parser)
    add_array_args(parser)
    parser.add_argument("--pass", dest="pass_index", type=int, default=0, metavar="P",
                        help="which pass of a layer that runs in several (default 0)")
    parser.add_argument("-o", "--output", metavar="IMAGE.npz", help="write the image")
    parser.add_argument("--dot", metavar="GRAPH.dot", help="write the graph in Graphviz DOT")
    parser.add_argument("--listing", action="store_true", help="print the image listing")
    parser.set_defaults(func=run_asm)
    dis = subparsers.add_parser(
        "disasm", help="check an image and print its listing",
        description="Read an image written by 'fdpu asm', check it and disassemble it.")
    dis.add_argument("image", metavar="IMAGE.npz")
    dis.set_defaults(func=run_disasm)


def run_asm(args):
    """Assemble the layer; return the exit status."""
    if args.output is not None and not args.output.endswith(".npz"):
        raise FdpuError(f"-o {args.output}: an image is a .npz file; give a name ending in .npz")
    check_outputs([("-o", args.output), ("--dot", args.dot)],
                  [("--weights", args.weights), ("--inputs", args.inputs),
                   ("--bias", args.bias)])
    name, w, x, params = resolve(args)
    plan = plan_layer(args, w, x, params)
    if not 0 <= args.pass_index < plan.passes:
        raise FdpuError(f"--pass must be in 0..{plan.passes - 1} for this layer, got "
                        f"{args.pass_index}")
    graph = graphs.build_graph(plan)
    graph.validate(params)
    placement = place(graph, params)
    segments, outputs = dbuf_layout.pass_memory(plan, w, x, args.pass_index)
    image = assemble(graph, placement, segments, plan.pass_micc_contexts(args.pass_index),
                     meta=dict(layer=name, plan=plan.describe(), pass_index=args.pass_index,
                               outputs=outputs))
    print(f"{name}: {plan.mode}, {len(graph.nodes)} instructions on {plan.engines} PEs "
          f"(kb {plan.kb}, gb {plan.gb}), pass {args.pass_index} of {plan.passes}, "
          f"{image.contexts} contexts")
    print(placement.report())
    if args.output:
        with replacing(args.output) as tmp, open(tmp, "wb") as f:
            image.save(f)
        print(f"wrote {args.output}")
    if args.dot:
        with replacing(args.dot) as tmp, open(tmp, "w", encoding="utf-8") as f:
            f.write(graph.to_dot())
        print(f"wrote {args.dot}")
    if args.listing:
        print(listing(image), end="")
    return 0


def run_disasm(args):
    """Print the listing of an image; return the exit status."""
    print(listing(load(args.image)), end="")
    return 0
