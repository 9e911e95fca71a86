# bash completion for vmkeeperctl                                  -*- shell-script -*-
# Install as /usr/share/bash-completion/completions/vmkeeperctl.

_vmkeeperctl_machines() {
    local -a bus=()
    local i
    for ((i = 1; i < ${#COMP_WORDS[@]} - 1; i++)); do
        case ${COMP_WORDS[i]} in
            --bus) bus=(--bus "${COMP_WORDS[i+1]}") ;;
            --bus=*) bus=("${COMP_WORDS[i]}") ;;
        esac
    done
    vmkeeperctl "${bus[@]}" --json list 2>/dev/null |
        sed -n 's/^ *"name": "\([a-z0-9-]*\)",$/\1/p'
}

_vmkeeperctl_shutdowns() {
    local -a bus=()
    local i
    for ((i = 1; i < ${#COMP_WORDS[@]} - 1; i++)); do
        case ${COMP_WORDS[i]} in
            --bus) bus=(--bus "${COMP_WORDS[i+1]}") ;;
            --bus=*) bus=("${COMP_WORDS[i]}") ;;
        esac
    done
    vmkeeperctl "${bus[@]}" --json shutdowns 2>/dev/null |
        sed -n 's/^ *"id": "\([A-Za-z0-9-]*\)",$/\1/p'
}

_vmkeeperctl() {
    local cur prev words cword
    _init_completion -n = || return

    local commands='list status create delete poweroff poweron events annotate drain undrain shutdowns version help'
    local global_opts='--bus --json --help'

    case $prev in
        --bus)
            COMPREPLY=($(compgen -W 'system session unix:path=' -- "$cur"))
            compopt -o nospace
            return
            ;;
        -f | --filename)
            _filedir '@(json|yaml|yml)'
            return
            ;;
        --grace | --timeout)
            return
            ;;
    esac

    local command='' i nargs=0
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            --bus | -f | --filename | --grace | --timeout) ((i++)) ;;
            -*) ;;
            *)
                if [[ -z $command ]]; then command=${words[i]}; else ((nargs++)); fi
                ;;
        esac
    done

    if [[ -z $command ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$global_opts" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$commands" -- "$cur"))
        fi
        return
    fi

    local opts=''
    case $command in
        create) opts='-f --filename' ;;
        delete) opts='--grace --wait --timeout' ;;
        poweroff | poweron) opts='--wait --timeout' ;;
        events) opts='-f --follow' ;;
        drain) opts='--wait' ;;
    esac

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts $global_opts" -- "$cur"))
        return
    fi

    case $command in
        status | delete | poweroff | poweron | annotate | events)
            if ((nargs == 0)); then
                COMPREPLY=($(compgen -W "$(_vmkeeperctl_machines)" -- "$cur"))
            fi
            ;;
        shutdowns)
            if ((nargs == 0)); then
                COMPREPLY=($(compgen -W "$(_vmkeeperctl_shutdowns)" -- "$cur"))
            fi
            ;;
        help)
            ((nargs == 0)) && COMPREPLY=($(compgen -W "$commands" -- "$cur"))
            ;;
    esac
} &&
    complete -F _vmkeeperctl vmkeeperctl
